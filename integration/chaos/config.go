package main

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dedupkit/dedup/internal/netfault"
	"github.com/dedupkit/dedup/processor"
)

// Guarantees the worker offers (its --guarantee values).
const (
	exactlyOnce = "exactly-once"
	bestEffort  = "best-effort" // goka's runtime: can lose or duplicate events, so reported, never asserted
)

// Config is one scenario: the cluster, the load, the faults and where the
// logs go. fullConfig holds the defaults of `make chaos` (the scenario of
// docs/reliability.md), shortConfig those of the short version that runs in `make test`.
type Config struct {
	// Cluster. With Brokers set the scenario runs on that cluster and starts
	// none (no broker faults possible); otherwise it starts its own with
	// kafka.sh: Nodes nodes on KafkaPort.. with data in KafkaData.
	Brokers     []string
	Nodes       int
	KafkaPort   int
	KafkaData   string
	KeepCluster bool // leave the own cluster running (and its data) at the end

	// Load.
	Events     int     // distinct good events
	DupRate    float64 // share of events sent twice
	LateShare  float64 // share of those duplicates re-published later (new offset, further down the stream)
	Bad        int     // malformed records
	BadKinds   []string
	Partitions int
	Aggregates int // distinct aggregate IDs (the record keys)
	Rate       int // records per second

	// Faults, applied at random moments while the load is produced.
	Instances   int // worker instances at most (and at the start)
	Kills       int // SIGKILL + restart of a random instance
	ScaleSteps  int // changes of the instance count, between 1 and Instances
	BrokerKills int // SIGKILL + restart of a broker, one at a time
	BrokerDown  time.Duration
	Zombies     int // SIGSTOP past the session timeout, then SIGCONT
	// NetPartitions cut w1, which reaches the brokers through a fault proxy
	// (internal/netfault), off the brokers past the session timeout while it
	// runs, then reconnect it; alternately by resets and by a blackhole.
	NetPartitions int
	// ProxyRoutes are the proxy's listen=target pairs: from `kafka.sh
	// proxy-routes` for the driver's cluster, from --proxy-routes with --brokers.
	ProxyRoutes    []netfault.Route
	Wipes          int // SIGKILL, delete the state dir, restart
	SessionTimeout time.Duration
	// StandbyReplicas is the exactly-once workers' --standby-replicas: on
	// by default, so the takeovers the faults cause go through standbys
	// and warm-ups.
	StandbyReplicas int

	Guarantees   []string // scenarios to run, in order; the first is asserted if exactly-once
	RunDir       string
	Seed         uint64
	DrainTimeout time.Duration
	ProcessorBin string // worker binary; empty: built into RunDir
}

func fullConfig() Config {
	return Config{
		Nodes: 3, KafkaPort: 19092, KafkaData: ".kafka-chaos",
		Events: 500_000, DupRate: 0.2, LateShare: 0.5, Bad: 5_000, BadKinds: allBadKinds(),
		Partitions: 12, Aggregates: 20_000, Rate: 1_000,
		Instances: 3, Kills: 30, ScaleSteps: 5, BrokerKills: 2, BrokerDown: 20 * time.Second,
		Zombies: 1, NetPartitions: 2, Wipes: 1, SessionTimeout: 3 * time.Second, StandbyReplicas: 1,
		Guarantees: []string{exactlyOnce, bestEffort}, RunDir: ".chaos",
		DrainTimeout: 15 * time.Minute,
	}
}

// shortConfig is sized to finish in a few minutes on a small machine next
// to a single broker.
func shortConfig() Config {
	c := fullConfig()
	c.Nodes = 1
	c.Events, c.Bad, c.Partitions, c.Aggregates, c.Rate = 20_000, 350, 6, 2_000, 400
	c.Kills, c.ScaleSteps, c.BrokerKills, c.Zombies, c.NetPartitions, c.Wipes = 8, 2, 0, 1, 1, 1
	c.Guarantees = []string{exactlyOnce}
	c.DrainTimeout = 3 * time.Minute
	return c
}

// parseFlags reads the command line. --preset short starts from shortConfig,
// so that any other flag given still wins.
func parseFlags(args []string) (Config, error) {
	preset := "full"
	for i, a := range args {
		if v, ok := strings.CutPrefix(strings.TrimLeft(a, "-"), "preset="); ok {
			preset = v
		} else if strings.TrimLeft(a, "-") == "preset" && i+1 < len(args) {
			preset = args[i+1]
		}
	}
	var cfg Config
	switch preset {
	case "full":
		cfg = fullConfig()
	case "short":
		cfg = shortConfig()
	default:
		return cfg, fmt.Errorf("--preset: %q is not full or short", preset)
	}
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.String("preset", "full", "full (500k events, 3 brokers, 30 kills...) or short (the make test version)")
	fs.Func("brokers", "run on this cluster (host:port,...) instead of starting one; no broker faults then", func(s string) error {
		cfg.Brokers = splitList(s)
		return nil
	})
	fs.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "brokers of the cluster the driver starts: 1 or 3")
	fs.IntVar(&cfg.KafkaPort, "kafka-port", cfg.KafkaPort, "first client port of the driver's cluster (node i: port+i-1)")
	fs.StringVar(&cfg.KafkaData, "kafka-data", cfg.KafkaData, "data dir of the driver's cluster (wiped at the start)")
	fs.BoolVar(&cfg.KeepCluster, "keep-cluster", cfg.KeepCluster, "leave the driver's cluster running and its data in place")
	fs.IntVar(&cfg.Events, "events", cfg.Events, "distinct good events")
	fs.Float64Var(&cfg.DupRate, "dup-rate", cfg.DupRate, "share of events sent twice (0..1)")
	fs.Float64Var(&cfg.LateShare, "late-share", cfg.LateShare, "share of the duplicates re-published later in the stream (0..1)")
	fs.IntVar(&cfg.Bad, "bad", cfg.Bad, "malformed records mixed in")
	fs.Func("bad-kinds", "comma-separated kinds of malformed records (default all: "+strings.Join(allBadKinds(), ",")+")", func(s string) error {
		cfg.BadKinds = splitList(s)
		return nil
	})
	fs.IntVar(&cfg.Partitions, "partitions", cfg.Partitions, "partitions of the input topic")
	fs.IntVar(&cfg.Aggregates, "aggregates", cfg.Aggregates, "distinct aggregate IDs (record keys)")
	fs.IntVar(&cfg.Rate, "rate", cfg.Rate, "records produced per second")
	fs.IntVar(&cfg.Instances, "instances", cfg.Instances, "worker instances at the start and at most")
	fs.IntVar(&cfg.Kills, "kills", cfg.Kills, "worker SIGKILLs with restart")
	fs.IntVar(&cfg.ScaleSteps, "scale-steps", cfg.ScaleSteps, "changes of the instance count between 1 and --instances")
	fs.IntVar(&cfg.BrokerKills, "broker-kills", cfg.BrokerKills, "broker SIGKILLs with restart, one at a time (needs the driver's 3-node cluster)")
	fs.DurationVar(&cfg.BrokerDown, "broker-down", cfg.BrokerDown, "longest time a killed broker stays down")
	fs.IntVar(&cfg.Zombies, "zombies", cfg.Zombies, "instances SIGSTOPped past the session timeout, then resumed")
	fs.IntVar(&cfg.NetPartitions, "net-partitions", cfg.NetPartitions, "times w1 is cut off the brokers (through a fault proxy) past the session timeout, then reconnected")
	fs.Func("proxy-routes", "with --brokers: listen=target,... for the fault proxy of --net-partitions (see kafka.sh proxy-routes)", func(s string) error {
		routes, err := netfault.ParseRoutes(s)
		cfg.ProxyRoutes = routes
		return err
	})
	fs.IntVar(&cfg.Wipes, "wipes", cfg.Wipes, "instances restarted with their state dir deleted")
	fs.IntVar(&cfg.StandbyReplicas, "standby-replicas", cfg.StandbyReplicas, "the exactly-once workers' --standby-replicas")
	fs.DurationVar(&cfg.SessionTimeout, "session-timeout", cfg.SessionTimeout, "the exactly-once workers' --session-timeout (best-effort runs with goka's 10s)")
	fs.Func("guarantees", "scenarios to run in order (default exactly-once,best-effort for full)", func(s string) error {
		cfg.Guarantees = splitList(s)
		return nil
	})
	fs.StringVar(&cfg.RunDir, "run-dir", cfg.RunDir, "parent of the run directory (logs of every worker incarnation, reports)")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "random seed of the load and the fault plan (0: from the clock)")
	fs.DurationVar(&cfg.DrainTimeout, "drain-timeout", cfg.DrainTimeout, "how long the workers may take to catch up after the load")
	fs.StringVar(&cfg.ProcessorBin, "processor-bin", cfg.ProcessorBin, "worker binary (default: go build ./cmd/processor into the run dir)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return cfg, nil
}

// Validate reports every unusable setting, named by its flag.
func (c *Config) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	for _, b := range c.Brokers {
		if !strings.Contains(b, ":") {
			bad("brokers", "%q has no port, want host:port", b)
		}
	}
	if len(c.Brokers) == 0 {
		if c.Nodes != 1 && c.Nodes != 3 {
			bad("nodes", "%d: kafka.sh runs 1 or 3 nodes", c.Nodes)
		}
		if c.KafkaPort < 1024 || c.KafkaPort > 65000 {
			bad("kafka-port", "%d is not in 1024..65000", c.KafkaPort)
		}
		if c.KafkaPort == 9092 {
			bad("kafka-port", "9092 is the default broker of `make test`; the driver wipes its cluster, pick another port")
		}
		if base := filepath.Base(filepath.Clean(c.KafkaData)); c.KafkaData == "" || base == ".kafka" {
			bad("kafka-data", "%q: the driver wipes this dir at the start; use a dir of its own (default .kafka-chaos)", c.KafkaData)
		}
	}
	if c.Events < 1 {
		bad("events", "%d: at least 1", c.Events)
	}
	if c.DupRate < 0 || c.DupRate > 1 {
		bad("dup-rate", "%v is not in 0..1", c.DupRate)
	}
	if c.LateShare < 0 || c.LateShare > 1 {
		bad("late-share", "%v is not in 0..1", c.LateShare)
	}
	if c.Bad < 0 {
		bad("bad", "%d is negative", c.Bad)
	}
	if c.Bad > 0 && len(c.BadKinds) == 0 {
		bad("bad-kinds", "empty, but --bad is %d", c.Bad)
	}
	for _, k := range c.BadKinds {
		if _, ok := badKinds[k]; !ok {
			bad("bad-kinds", "%q is not one of %s", k, strings.Join(allBadKinds(), ", "))
		}
	}
	if c.Partitions < 1 || c.Partitions > 1000 {
		bad("partitions", "%d is not in 1..1000", c.Partitions)
	}
	if c.Aggregates < 1 {
		bad("aggregates", "%d: at least 1", c.Aggregates)
	}
	if c.Rate < 1 {
		bad("rate", "%d: at least 1 record per second", c.Rate)
	}
	if c.Instances < 1 || c.Instances > 10 {
		bad("instances", "%d is not in 1..10", c.Instances)
	}
	for _, f := range []struct {
		flag string
		n    int
	}{{"kills", c.Kills}, {"scale-steps", c.ScaleSteps}, {"broker-kills", c.BrokerKills}, {"zombies", c.Zombies}, {"net-partitions", c.NetPartitions}, {"wipes", c.Wipes}} {
		if f.n < 0 {
			bad(f.flag, "%d is negative", f.n)
		}
	}
	if c.ScaleSteps > 0 && c.Instances < 2 {
		bad("scale-steps", "%d steps need --instances of 2 or more", c.ScaleSteps)
	}
	if c.Zombies > 0 && c.Instances < 2 {
		bad("zombies", "a zombie needs another instance to take over: --instances of 2 or more")
	}
	if c.NetPartitions > 0 && c.Instances < 2 {
		bad("net-partitions", "a cut-off instance needs another to take over: --instances of 2 or more")
	}
	if c.NetPartitions > 0 && len(c.Brokers) > 0 && len(c.ProxyRoutes) == 0 {
		bad("net-partitions", "%d partitions on --brokers need --proxy-routes (a listener per broker that advertises the proxy's address)", c.NetPartitions)
	}
	if c.BrokerKills > 0 && (len(c.Brokers) > 0 || c.Nodes < 3) {
		bad("broker-kills", "%d broker kills need the driver's own 3-node cluster (no --brokers, --nodes 3)", c.BrokerKills)
	}
	if c.BrokerKills > 0 && c.BrokerDown < time.Second {
		bad("broker-down", "%v: at least 1s", c.BrokerDown)
	}
	if c.StandbyReplicas < 0 || c.StandbyReplicas > processor.MaxStandbyReplicas {
		bad("standby-replicas", "%d: want 0 to %d", c.StandbyReplicas, processor.MaxStandbyReplicas)
	}
	if c.SessionTimeout < time.Second {
		bad("session-timeout", "%v: at least 1s", c.SessionTimeout)
	}
	if len(c.Guarantees) == 0 {
		bad("guarantees", "empty")
	}
	for _, g := range c.Guarantees {
		if g != exactlyOnce && g != bestEffort {
			bad("guarantees", "%q is not exactly-once or best-effort (the worker's --guarantee values)", g)
		}
	}
	if c.RunDir == "" {
		bad("run-dir", "empty")
	}
	if c.DrainTimeout < 10*time.Second {
		bad("drain-timeout", "%v: at least 10s", c.DrainTimeout)
	}
	// Every fault needs some room: at most one per two seconds of load.
	faults := c.Kills + c.ScaleSteps + 2*c.BrokerKills + c.Zombies + c.NetPartitions + c.Wipes
	if w := c.window(); faults > 0 && w < time.Duration(faults)*2*time.Second {
		bad("rate", "%d faults do not fit in %v of load; produce more slowly or apply fewer faults", faults, w.Round(time.Second))
	}
	return errors.Join(errs...)
}

// records is how many records the load writes.
func (c *Config) records() int {
	return c.Events + int(float64(c.Events)*c.DupRate+0.5) + c.Bad
}

// window is how long producing the load takes at Rate.
func (c *Config) window() time.Duration {
	return time.Duration(float64(c.records()) / float64(c.Rate) * float64(time.Second))
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return slices.Compact(out)
}
