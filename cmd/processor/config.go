package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/codecs"
	"github.com/dedupkit/dedup/internal/kafkautil"
	"github.com/dedupkit/dedup/security"
)

// defaultSessionTimeout is sarama's, and the only one goka's runtime runs with.
const defaultSessionTimeout = 10 * time.Second

// defaultSweepInterval is the exactly-once sweeper's; goka's runtime has none.
const defaultSweepInterval = time.Minute

// Guarantee names a delivery guarantee of the worker.
const (
	AtLeastOnce = "at-least-once"
	ExactlyOnce = "exactly-once"
)

// Config is everything `processor run` takes. Every field has a flag and an
// environment variable PROCESSOR_<FLAG> (upper case, dashes as underscores);
// a flag on the command line wins over the environment.
type Config struct {
	Brokers         []string
	Security        security.Config
	Group           string
	Input           string
	Output          string
	DLQ             string
	KeyType         string
	IDField         string
	IDHeader        string
	IDSourceHeader  string
	Retention       time.Duration
	StateDir        string
	HTTPAddr        string
	Guarantee       string
	CommitInterval  time.Duration
	Threads         int
	SessionTimeout  time.Duration
	SweepInterval   time.Duration
	MemLimitRatio   float64
	StaleEvents     string
	Rekey           string
	StrictRetention bool
	Handler         string
	HandlerRetries  int
	RetryBackoff    time.Duration
	Replication     int
	LogLevel        string
	LogFormat       string
}

// flags binds cfg to a flag set with the defaults and help texts.
func (cfg *Config) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Func("brokers", "comma-separated Kafka bootstrap brokers (required)", func(s string) error {
		cfg.Brokers = splitList(s)
		return nil
	})
	securityFlags(fs, &cfg.Security)
	fs.StringVar(&cfg.Group, "group", "", "consumer group; also names the dedup table <group>-table (required)")
	fs.StringVar(&cfg.Input, "input", "", "input topic (required; must exist)")
	fs.StringVar(&cfg.Output, "output", "", "output topic (required; created if missing)")
	fs.StringVar(&cfg.DLQ, "dlq", "", "dead-letter topic (default <group>-dlq; created if missing)")
	fs.StringVar(&cfg.KeyType, "key-type", string(dedup.KeyEventID), "dedup key: event-id or aggregate-id (once per aggregate within the retention)")
	fs.StringVar(&cfg.IDField, "id-field", "eventId", "top-level JSON field holding the event ID")
	fs.StringVar(&cfg.IDHeader, "id-header", "", "take the event ID from this header instead of the body (CloudEvents binary mode: ce_id)")
	fs.StringVar(&cfg.IDSourceHeader, "id-source-header", "", "header that makes the header ID unique (default ce_source when --id-header=ce_id)")
	fs.DurationVar(&cfg.Retention, "retention", dedup.DefaultRetention, "how long a seen ID is remembered; keep it longer than the input topic's retention")
	fs.StringVar(&cfg.StateDir, "state-dir", "./state", "directory for the local LevelDB tables (rebuilt from Kafka if lost)")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", ":8080", "address for /metrics, /healthz and /readyz; empty disables")
	fs.StringVar(&cfg.Guarantee, "guarantee", ExactlyOnce, "exactly-once (Kafka transactions; needs Kafka 2.8+) or at-least-once (goka's runtime)")
	fs.DurationVar(&cfg.CommitInterval, "commit-interval", 100*time.Millisecond, "how often a transaction (exactly-once) or the offsets (at-least-once) are committed")
	fs.IntVar(&cfg.Threads, "threads", 1, "consumer-group members (stream threads) in this process, a transactional producer each; exactly-once only. With --rekey=always, events whose dedup partition another member owns go through the loop topic, so more members loop more events")
	fs.DurationVar(&cfg.SessionTimeout, "session-timeout", defaultSessionTimeout, "group session timeout: how long a silent instance keeps its partitions (exactly-once; at-least-once keeps goka's 10s)")
	fs.DurationVar(&cfg.SweepInterval, "sweep-interval", defaultSweepInterval, "how often the sweeper scans a sixtieth of each partition's table and deletes the expired records it finds, in bounded batches (exactly-once)")
	fs.Float64Var(&cfg.MemLimitRatio, "memory-limit-ratio", 0.9, "soft memory limit for the Go runtime as a share of the container's (cgroup) memory limit, so the GC works harder before the kernel kills; 0 disables; GOMEMLIMIT wins when set")
	fs.StringVar(&cfg.StaleEvents, "stale-events", string(dedup.StaleProcess), "unseen events older than --retention: process, skip or dead-letter")
	fs.StringVar(&cfg.Rekey, "rekey", string(dedup.RekeyAlways), "always: loop events whose record key is not their dedup key to that key's partition; never: judge them in their own partition (only when every copy of an event has the same record key; exactly-once only)")
	fs.BoolVar(&cfg.StrictRetention, "strict-retention", false, "refuse to start when --retention is shorter than the input topic's retention.ms")
	fs.StringVar(&cfg.Handler, "handler", "forward", "business handler: forward (dedup bridge) or settlements (example)")
	fs.IntVar(&cfg.HandlerRetries, "handler-retries", 3, "retries of a failing handler before the event is dead-lettered")
	fs.DurationVar(&cfg.RetryBackoff, "retry-backoff", 100*time.Millisecond, "pause before the first handler retry, doubled each time")
	fs.IntVar(&cfg.Replication, "replication-factor", -1, "replication factor of topics the worker creates; -1 = broker default")
	fs.StringVar(&cfg.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&cfg.LogFormat, "log-format", "text", "text or json")
	return fs
}

// parseConfig reads the environment, then the command line, then validates.
func parseConfig(name string, args []string, env func(string) (string, bool)) (*Config, error) {
	cfg := &Config{}
	fs := cfg.flags(name)
	fs.SetOutput(os.Stderr)
	var envErrs []error
	fs.VisitAll(func(f *flag.Flag) {
		key := envName(f.Name)
		if v, ok := env(key); ok {
			if err := fs.Set(f.Name, v); err != nil {
				envErrs = append(envErrs, fmt.Errorf("%s (for --%s): %w", key, f.Name, err))
			}
		}
	})
	if err := errors.Join(envErrs...); err != nil {
		return nil, err
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.DLQ == "" && cfg.Group != "" {
		cfg.DLQ = cfg.Group + "-dlq"
	}
	if cfg.IDSourceHeader == "" && cfg.IDHeader == "ce_id" {
		cfg.IDSourceHeader = "ce_source"
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

func envName(flagName string) string {
	return "PROCESSOR_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Validate checks every field and names the flag of each problem.
func (cfg *Config) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	if len(cfg.Brokers) == 0 {
		bad("brokers", "required (or %s), e.g. 127.0.0.1:9092", envName("brokers"))
	}
	for _, b := range cfg.Brokers {
		if !strings.Contains(b, ":") {
			bad("brokers", "%q has no port, want host:port", b)
		}
	}
	for _, req := range []struct{ flag, v string }{{"group", cfg.Group}, {"input", cfg.Input}, {"output", cfg.Output}} {
		if req.v == "" {
			bad(req.flag, "required (or %s)", envName(req.flag))
		}
	}
	if cfg.Input != "" && (cfg.Input == cfg.Output || cfg.Input == cfg.DLQ) {
		bad("input", "%q is also the output or dead-letter topic; events would loop forever", cfg.Input)
	}
	if cfg.Group != "" && (cfg.Output == cfg.Group+"-table" || cfg.DLQ == cfg.Group+"-table") {
		bad("output", "%q is the dedup table's changelog topic", cfg.Group+"-table")
	}
	if kt := dedup.KeyType(cfg.KeyType); kt != dedup.KeyEventID && kt != dedup.KeyAggregateID {
		bad("key-type", "%q is not event-id or aggregate-id", cfg.KeyType)
	}
	if cfg.IDHeader == "" && cfg.IDField == "" {
		bad("id-field", "empty; set it or --id-header")
	}
	if cfg.Retention <= 0 {
		bad("retention", "%v must be positive, e.g. 168h", cfg.Retention)
	}
	if cfg.StateDir == "" {
		bad("state-dir", "required")
	}
	switch cfg.Guarantee {
	case AtLeastOnce, ExactlyOnce:
	default:
		bad("guarantee", "%q is not at-least-once or exactly-once", cfg.Guarantee)
	}
	if cfg.CommitInterval <= 0 {
		bad("commit-interval", "%v must be positive, e.g. 100ms", cfg.CommitInterval)
	}
	if cfg.Threads < 1 || cfg.Threads > 64 {
		bad("threads", "%d: want 1 to 64", cfg.Threads)
	}
	if cfg.Threads > 1 && cfg.Guarantee == AtLeastOnce {
		bad("threads", "only exactly-once runs several members per process; run more processes instead")
	}
	if cfg.SessionTimeout < time.Second {
		bad("session-timeout", "%v: at least 1s (and within the broker's group.min/max.session.timeout.ms)", cfg.SessionTimeout)
	}
	if cfg.SessionTimeout != defaultSessionTimeout && cfg.Guarantee == AtLeastOnce {
		// Applied to goka's group, 3 s made its members drop each other:
		// a goka member takes longer than that to leave a session in a
		// rebalance, is removed, and its rejoin starts the next rebalance.
		bad("session-timeout", "%v: exactly-once only; goka's at-least-once runtime keeps %v (shorter, its "+
			"members dropped each other in endless rebalances: docs/reliability.md)", cfg.SessionTimeout, defaultSessionTimeout)
	}
	if cfg.SweepInterval <= 0 {
		bad("sweep-interval", "%v must be positive", cfg.SweepInterval)
	}
	if cfg.SweepInterval != defaultSweepInterval && cfg.Guarantee == AtLeastOnce {
		bad("sweep-interval", "%v: exactly-once only; goka's at-least-once runtime has no sweeper (an expired record is "+
			"judged absent there, not deleted)", cfg.SweepInterval)
	}
	if err := cfg.Security.Validate(); err != nil {
		errs = append(errs, err)
	}
	if !(cfg.MemLimitRatio >= 0 && cfg.MemLimitRatio <= 1) { // NaN too
		bad("memory-limit-ratio", "%v: want 0 (off) to 1, e.g. 0.9", cfg.MemLimitRatio)
	}
	switch dedup.StalePolicy(cfg.StaleEvents) {
	case dedup.StaleProcess, dedup.StaleSkip, dedup.StaleDeadLetter:
	default:
		bad("stale-events", "%q is not process, skip or dead-letter", cfg.StaleEvents)
	}
	switch dedup.RekeyPolicy(cfg.Rekey) {
	case dedup.RekeyAlways:
	case dedup.RekeyNever:
		if cfg.Guarantee == AtLeastOnce {
			bad("rekey", "never needs --guarantee=exactly-once: goka's context reads the table only under the record key")
		}
	default:
		bad("rekey", "%q is not always or never", cfg.Rekey)
	}
	if _, err := handlerByName(cfg.Handler); err != nil {
		bad("handler", "%v", err)
	}
	if cfg.HandlerRetries < 0 {
		bad("handler-retries", "%d must not be negative", cfg.HandlerRetries)
	}
	if cfg.RetryBackoff < 0 {
		bad("retry-backoff", "%v must not be negative", cfg.RetryBackoff)
	}
	if cfg.Replication == 0 || cfg.Replication < -1 || cfg.Replication > 32767 {
		bad("replication-factor", "%d: want -1 (broker default) or a positive number", cfg.Replication)
	}
	if _, err := parseLevel(cfg.LogLevel); err != nil {
		bad("log-level", "%v", err)
	}
	if cfg.LogFormat != "text" && cfg.LogFormat != "json" {
		bad("log-format", "%q is not text or json", cfg.LogFormat)
	}
	return errors.Join(errs...)
}

// Topology builds the dedup topology the config describes.
func (cfg *Config) Topology(obs dedup.Observer, log *slog.Logger) *dedup.Topology {
	h, _ := handlerByName(cfg.Handler)
	ids := codecs.IDSource{Field: cfg.IDField, Header: cfg.IDHeader, SourceHeader: cfg.IDSourceHeader}
	return &dedup.Topology{
		Group: cfg.Group, Input: cfg.Input, Output: cfg.Output, DLQ: cfg.DLQ,
		Table:    dedup.Table{KeyType: dedup.KeyType(cfg.KeyType), Retention: cfg.Retention},
		IDSource: ids, Handler: h,
		HandlerRetries: cfg.HandlerRetries, RetryBackoff: cfg.RetryBackoff,
		StaleEvents: dedup.StalePolicy(cfg.StaleEvents),
		Rekey:       dedup.RekeyPolicy(cfg.Rekey),
		Observer:    obs, Logger: log,
	}
}

func handlerByName(name string) (dedup.Handler, error) {
	switch name {
	case "forward":
		return dedup.Forward(), nil
	case "settlements":
		return dedup.Settlements(), nil
	}
	return nil, fmt.Errorf("%q is not forward or settlements", name)
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(s))
	return l, err
}

func newLogger(cfg *Config, w *os.File) *slog.Logger {
	level, _ := parseLevel(cfg.LogLevel)
	opts := &slog.HandlerOptions{Level: level}
	// Error attributes name Kafka's error codes (PRODUCER_FENCED, ...).
	if cfg.LogFormat == "json" {
		return kafkautil.NamingLogger(slog.New(slog.NewJSONHandler(w, opts)))
	}
	return kafkautil.NamingLogger(slog.New(slog.NewTextHandler(w, opts)))
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
