package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/checks"
	"github.com/dedupkit/dedup/internal/guarantee"
	"github.com/dedupkit/dedup/internal/kafkautil"
	"github.com/dedupkit/dedup/processor"
)

// defaultSessionTimeout is sarama's, and the only one goka's runtime runs with.
const defaultSessionTimeout = 10 * time.Second

// defaultSweepInterval is the exactly-once sweeper's; goka's runtime has none.
const defaultSweepInterval = time.Minute

// Config is everything `processor run` takes. Every field has a flag and an
// environment variable PROCESSOR_<FLAG> (upper case, dashes as underscores);
// a flag on the command line wins over the environment.
type Config struct {
	Brokers         []string
	Security        processor.Security
	Group           string
	Inputs          []string
	Output          string
	DLQ             string
	KeyType         string
	IDField         string
	IDHeader        string
	IDSourceHeader  string
	Retention       time.Duration
	StateDir        string
	InstanceID      string
	HTTPAddr        string
	Guarantee       string
	CommitInterval  time.Duration
	Threads         int
	SessionTimeout  time.Duration
	FenceStuckAfter time.Duration
	PeerAddr        string
	PeerAdvertise   string
	PeerSecretFile  string
	// PeerSecret is read by Validate from PeerSecretFile or DEDUP_PEER_SECRET.
	PeerSecret      []byte
	LeaveGroup      bool
	StandbyReplicas int
	SweepInterval   time.Duration
	ReadyAbortLimit int
	ReadyStallAfter time.Duration
	LiveStallAfter  time.Duration
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

	// Which liveness settings came from the user (peerSources).
	peerAddrSet      bool
	peerSecretEnv    string
	peerSecretEnvSet bool
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
	fs.Func("input", "comma-separated input topics (required; must exist, all with one partition count); an event on two of them is processed once", func(s string) error {
		cfg.Inputs = splitInputs(s)
		return nil
	})
	fs.StringVar(&cfg.Output, "output", "", "output topic (required; created if missing)")
	fs.StringVar(&cfg.DLQ, "dlq", "", "dead-letter topic (default <group>-dlq; created if missing)")
	fs.StringVar(&cfg.KeyType, "key-type", string(dedup.KeyEventID), "dedup key: event-id or aggregate-id (once per aggregate within the retention)")
	fs.StringVar(&cfg.IDField, "id-field", "eventId", "JSON field holding the event ID; a dotted path (meta.eventId) reads nested objects")
	fs.StringVar(&cfg.IDHeader, "id-header", "", "take the event ID from this header instead of the body (CloudEvents binary mode: ce_id)")
	fs.StringVar(&cfg.IDSourceHeader, "id-source-header", "", "header that makes the header ID unique (default ce_source when --id-header=ce_id)")
	fs.DurationVar(&cfg.Retention, "retention", dedup.DefaultRetention, "how long a seen ID is remembered; keep it longer than the input topics' retention")
	fs.StringVar(&cfg.StateDir, "state-dir", "./state", "directory for the local LevelDB tables (rebuilt from Kafka if lost)")
	fs.StringVar(&cfg.InstanceID, "instance-id", "", "this instance's identity in transactional IDs and static group membership; stable across restarts (a StatefulSet's pod name). Empty: an ID generated once and kept in --state-dir, so a lost state dir makes a new identity. exactly-once only")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", ":8080", "address for /metrics, /healthz and /readyz; empty disables")
	fs.StringVar(&cfg.Guarantee, "guarantee", ExactlyOnce, "exactly-once (Kafka outputs, seen marks and offsets commit in one transaction; needs Kafka 2.8+) or best-effort (goka's runtime: a crash or kill can lose or duplicate events)")
	fs.DurationVar(&cfg.CommitInterval, "commit-interval", 100*time.Millisecond, "how often a transaction (exactly-once) or the offsets (best-effort) are committed")
	fs.IntVar(&cfg.Threads, "threads", 1, "consumer-group members (stream threads) in this process, a transactional producer each; exactly-once only. With --rekey=always, events whose dedup partition another member owns go through the loop topic, so more members loop more events")
	fs.DurationVar(&cfg.SessionTimeout, "session-timeout", defaultSessionTimeout, "group session timeout: how long a silent instance keeps its partitions (exactly-once; best-effort keeps goka's 10s)")
	fs.IntVar(&cfg.StandbyReplicas, "standby-replicas", 0, "other instances that keep a copy of each partition's table up to date by tailing its changelog (0 to 3): a partition whose instance dies or leaves goes to one of them and restores only the tail, and an instance that joins takes partitions' tables over once it has caught up on them (warm-up; with --rekey=always it consumes their inputs meanwhile, forwarding to the tables' holders). Each copy costs its instance the disk and about the memory of an owned partition; give every instance of a group the same value (exactly-once only)")
	fs.DurationVar(&cfg.FenceStuckAfter, "fence-stuck-after", 0, "abort a transaction of another instance of the group that has stayed open this long while it holds this instance's partitions, taking it for a dead instance's (kill -9), instead of waiting --session-timeout for the group to notice the death. It must exceed --commit-interval: a live instance ends its transactions that often, however long its handler's calls take; 10s (the transaction timeout) or more: never (exactly-once; 0: 2s, or twice --commit-interval when longer)")
	peerFlags(fs, cfg)
	fs.BoolVar(&cfg.LeaveGroup, "leave-group-on-stop", false, "make every stop a stop for good (scale in): once the last transaction committed, leave the consumer group so the other instances take this one's partitions at once, not after --session-timeout. Off: a stop is a restart, and the instance gets its partitions back without a rebalance; SIGUSR1 stops for good once, SIGTERM per this flag (exactly-once; best-effort members always leave)")
	fs.DurationVar(&cfg.SweepInterval, "sweep-interval", defaultSweepInterval, "how often the sweeper scans a sixtieth of each partition's table and deletes the expired records it finds, in bounded batches (exactly-once)")
	fs.IntVar(&cfg.ReadyAbortLimit, "ready-abort-limit", processor.DefaultReadyAbortLimit, "/readyz answers 503 once a member aborted this many transactions in a row (exactly-once)")
	fs.DurationVar(&cfg.ReadyStallAfter, "ready-stall-after", 0, "/readyz answers 503 once consumed records have waited this long for their commit (exactly-once; 0: 30s, or --commit-interval plus the 10s transaction timeout when longer)")
	fs.DurationVar(&cfg.LiveStallAfter, "live-stall-after", 0, "/healthz answers 503 once consumed records have waited this long for their commit, for the orchestrator to restart the worker (exactly-once; 0: 5m, or twice the ready bound when longer)")
	fs.Float64Var(&cfg.MemLimitRatio, "memory-limit-ratio", 0.9, "soft memory limit for the Go runtime as a share of the container's (cgroup) memory limit, so the GC works harder before the kernel kills; 0 disables; GOMEMLIMIT wins when set")
	fs.StringVar(&cfg.StaleEvents, "stale-events", string(dedup.StaleProcess), "unseen events older than --retention: process, skip or dead-letter")
	fs.StringVar(&cfg.Rekey, "rekey", string(dedup.RekeyAlways), "always: loop events whose record key is not their dedup key to that key's partition; never: judge them in their own partition (only when every copy of an event has the same record key and, with several inputs, every input's producers partition alike; exactly-once only)")
	fs.BoolVar(&cfg.StrictRetention, "strict-retention", false, "refuse to start when --retention is shorter than an input topic's retention.ms")
	fs.StringVar(&cfg.Handler, "handler", "forward", "business handler: forward (the dedup bridge: each event output unchanged); a handler of your own runs through the library")
	fs.IntVar(&cfg.HandlerRetries, "handler-retries", dedup.DefaultHandlerRetries, "retries of a failing handler before the event is dead-lettered")
	fs.DurationVar(&cfg.RetryBackoff, "retry-backoff", dedup.DefaultRetryBackoff, "pause before the first handler retry, doubled each time")
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
	if err := setFromEnv(fs, env); err != nil {
		return nil, err
	}
	if err := parseArgs(fs, args); err != nil {
		return nil, err
	}
	cfg.peerSources(fs, env)
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

// setFromEnv sets each flag of fs whose PROCESSOR_ variable env holds; the
// command line, parsed after it, wins. Every bad value is reported, each
// naming its variable and flag.
func setFromEnv(fs *flag.FlagSet, env func(string) (string, bool)) error {
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		key := envName(f.Name)
		if v, ok := env(key); ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s (for --%s): %w", key, f.Name, err))
			}
		}
	})
	return errors.Join(errs...)
}

// parseArgs parses the command line into fs; the commands take no
// positional arguments.
func parseArgs(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return nil
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
	for _, req := range []struct{ flag, v string }{{"group", cfg.Group}, {"input", strings.Join(cfg.Inputs, ",")}, {"output", cfg.Output}} {
		if req.v == "" {
			bad(req.flag, "required (or %s)", envName(req.flag))
		}
	}
	cfg.validateInputs(bad)
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
	if cfg.InstanceID != "" {
		if err := checks.InstanceID(cfg.InstanceID); err != nil {
			bad("instance-id", "%v", err)
		}
		if cfg.Guarantee != ExactlyOnce {
			bad("instance-id", "exactly-once only: goka's runtime has no transactional or static identity")
		}
	}
	if err := guarantee.Check(cfg.Guarantee); err != nil {
		bad("guarantee", "%v", err)
	}
	if cfg.CommitInterval <= 0 {
		bad("commit-interval", "%v must be positive, e.g. 100ms", cfg.CommitInterval)
	}
	if cfg.Threads < 1 || cfg.Threads > 64 {
		bad("threads", "%d: want 1 to 64", cfg.Threads)
	}
	if cfg.Threads > 1 && cfg.Guarantee == BestEffort {
		bad("threads", "only exactly-once runs several members per process; run more processes instead")
	}
	if cfg.SessionTimeout < time.Second {
		bad("session-timeout", "%v: at least 1s (and within the broker's group.min/max.session.timeout.ms)", cfg.SessionTimeout)
	}
	if cfg.SessionTimeout != defaultSessionTimeout && cfg.Guarantee == BestEffort {
		// A shorter timeout makes goka's members drop each other: a goka
		// member can take longer than that to leave a session in a
		// rebalance, is removed, and its rejoin starts the next rebalance.
		bad("session-timeout", "%v: exactly-once only; goka's best-effort runtime keeps %v (shorter, its "+
			"members dropped each other in endless rebalances: docs/reliability.md)", cfg.SessionTimeout, defaultSessionTimeout)
	}
	if cfg.FenceStuckAfter < 0 {
		bad("fence-stuck-after", "%v must not be negative (0: the default)", cfg.FenceStuckAfter)
	}
	if cfg.FenceStuckAfter != 0 && cfg.Guarantee == BestEffort {
		bad("fence-stuck-after", "%v: exactly-once only (best-effort writes no transactions)", cfg.FenceStuckAfter)
	}
	cfg.checkPeers(bad)
	if cfg.StandbyReplicas < 0 || cfg.StandbyReplicas > processor.MaxStandbyReplicas {
		bad("standby-replicas", "%d: want 0 to %d", cfg.StandbyReplicas, processor.MaxStandbyReplicas)
	}
	if cfg.StandbyReplicas > 0 && cfg.Guarantee == BestEffort {
		bad("standby-replicas", "exactly-once only; goka's best-effort runtime has no standby replicas")
	}
	if cfg.LeaveGroup && cfg.Guarantee == BestEffort {
		bad("leave-group-on-stop", "exactly-once only; goka's best-effort members are dynamic and leave the group on every stop")
	}
	if cfg.SweepInterval <= 0 {
		bad("sweep-interval", "%v must be positive", cfg.SweepInterval)
	}
	if cfg.SweepInterval != defaultSweepInterval && cfg.Guarantee == BestEffort {
		bad("sweep-interval", "%v: exactly-once only; goka's best-effort runtime has no sweeper (an expired record is "+
			"judged absent there, not deleted)", cfg.SweepInterval)
	}
	cfg.validateHealth(bad)
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
		if cfg.Guarantee == BestEffort {
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
	if floor := cfg.CommitInterval; cfg.FenceStuckAfter > 0 && cfg.FenceStuckAfter <= floor {
		bad("fence-stuck-after", "%v: must exceed --commit-interval (%v): "+
			"a live instance's transaction may stay open that long", cfg.FenceStuckAfter, floor)
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

// validateInputs checks each topic of --input. An empty element (a stray
// comma) or a topic named twice is a typo, refused rather than guessed at.
func (cfg *Config) validateInputs(bad func(flag, format string, args ...any)) {
	if slices.Contains(cfg.Inputs, "") {
		bad("input", "%q names an empty topic", strings.Join(cfg.Inputs, ","))
	}
	for i, in := range cfg.Inputs {
		switch {
		case in == "":
		case slices.Contains(cfg.Inputs[:i], in):
			bad("input", "%q is named twice", in)
		case in == cfg.Output || in == cfg.DLQ:
			bad("input", "%q is also the output or dead-letter topic; events would loop forever", in)
		case cfg.Group != "" && (in == cfg.Group+"-table" || in == cfg.Group+"-loop"):
			bad("input", "%q is the group's own table or loop topic", in)
		}
	}
}

// validateHealth checks the health bounds (processor.Config's rules, with
// the flags named).
func (cfg *Config) validateHealth(bad func(flag, format string, args ...any)) {
	if cfg.Guarantee == BestEffort {
		// goka's runtime has no transactions to watch: /readyz judges only
		// the table restore and /healthz is always 200 there.
		for _, f := range []struct {
			flag string
			set  bool
			v    any
		}{
			{"ready-abort-limit", cfg.ReadyAbortLimit != processor.DefaultReadyAbortLimit, cfg.ReadyAbortLimit},
			{"ready-stall-after", cfg.ReadyStallAfter != 0, cfg.ReadyStallAfter},
			{"live-stall-after", cfg.LiveStallAfter != 0, cfg.LiveStallAfter},
		} {
			if f.set {
				bad(f.flag, "%v: exactly-once only; goka's best-effort runtime does not watch its commits", f.v)
			}
		}
		return
	}
	if cfg.ReadyAbortLimit < 1 {
		bad("ready-abort-limit", "%d: at least 1", cfg.ReadyAbortLimit)
	}
	if cfg.ReadyStallAfter < 0 || cfg.LiveStallAfter < 0 {
		bad("ready-stall-after", "%v, --live-stall-after %v: must not be negative (0: the default)", cfg.ReadyStallAfter, cfg.LiveStallAfter)
		return
	}
	ready, live := checks.StallBounds(cfg.CommitInterval, processor.DefaultTransactionTimeout, cfg.ReadyStallAfter, cfg.LiveStallAfter)
	if floor := max(cfg.CommitInterval, processor.DefaultTransactionTimeout); ready <= floor {
		bad("ready-stall-after", "%v: must exceed --commit-interval and the transaction timeout (%v): a commit may take that long", ready, floor)
	}
	if live <= ready {
		bad("live-stall-after", "%v: must exceed --ready-stall-after (%v)", live, ready)
	}
}

// Topology defines the dedup topology the config describes, through the
// library's public API (dedup.Define), as any library user would.
func (cfg *Config) Topology() (*dedup.Topology, error) {
	h, _ := handlerByName(cfg.Handler)
	id := dedup.JSONField(cfg.IDField)
	if cfg.IDHeader != "" {
		id = dedup.HeaderID(cfg.IDHeader, cfg.IDSourceHeader)
	}
	return dedup.Define(cfg.Group,
		dedup.Input(cfg.Inputs...), dedup.Output(cfg.Output), dedup.DeadLetter(cfg.DLQ),
		dedup.EventID(id), dedup.KeyBy(dedup.KeyType(cfg.KeyType)), dedup.Retention(cfg.Retention),
		dedup.Handle(h), dedup.Retries(cfg.HandlerRetries, cfg.RetryBackoff),
		dedup.StaleEvents(dedup.StalePolicy(cfg.StaleEvents)), dedup.Rekey(dedup.RekeyPolicy(cfg.Rekey)))
}

func handlerByName(name string) (dedup.Handler, error) {
	switch name {
	case "forward":
		return dedup.Forward(), nil
	}
	return nil, fmt.Errorf("%q is not forward (a handler of your own runs through the library: docs/library.md)", name)
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

// splitInputs splits a comma-separated list of topics, keeping empty
// elements for Validate to refuse; an empty string is no topic at all.
func splitInputs(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
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
