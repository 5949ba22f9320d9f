// Package harness runs the benchmark of docs/benchmarks.md: the same input through
// every contender, one after another, against one broker, and reports
// throughput, end-to-end latency, CPU, peak RSS, correctness and the dedup
// table's restore and memory figures, as a table and as docs/benchmarks.md
// with charts it draws itself.
//
// The Kafka Streams rows (kstreams, kstreams-repartition) run a JVM as the
// contender process: the harness builds bench/kstreams's jar with Maven before
// anything is timed (when it is missing or older than its sources), and the
// contender process execs java on it, so the CPU time and peak RSS read from
// /proc are the JVM's. Each exactly-once worker row is then set against the
// Kafka Streams row doing the same routing (a local store for --rekey=never,
// a repartition topic otherwise): throughput, CPU per 1M events and p99 as
// ratios, cold (the whole run) and warm (from a fifth of the outputs on, when
// the JVM's JIT and the caches are warm).
//
// RunFailover is the failover benchmark of docs/benchmarks-failover.md: a
// group of instances under a steady load and the pause each kill, restart or
// scale out causes, read from the group's committed offsets (failover*.go).
package harness

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/dedupkit/dedup/bench/contenders"
)

// Config is one benchmark run.
type Config struct {
	Brokers []string
	// Records is N, the input size of the throughput runs (duplicates
	// included); Runs is how many times each contender reads it (the median
	// is reported).
	Records int
	// SlowRecords, when set below Records, is the input size for the Redis
	// and PostgreSQL contenders (a plan of the same shape), so a full run
	// fits in its time; their throughput is a rate either way.
	SlowRecords int
	Runs        int
	Partitions  int32
	DupRate     float64
	// PayloadBytes is the size of each event's payload object.
	PayloadBytes int
	// Rate (records/s) and LatencySeconds shape the latency runs: a fresh
	// input written at Rate while the contender runs.
	Rate           int
	LatencySeconds float64
	// LatencyWarmup is the pause between READY and the first record of a
	// latency run, so the figure is steady state (default 2s).
	LatencyWarmup time.Duration
	// Contenders to run, by name (default: all of Contenders()).
	Contenders []string
	// RestoreRecords: seen IDs in the one-partition table restored on a
	// fresh instance; HoldRecords: seen IDs the worker holds for the RSS and
	// disk figure. 0 skips either.
	RestoreRecords int
	HoldRecords    int
	// HoldMemoryLimit is the hard memory limit (bytes) of the cgroup the
	// hold's worker runs in; 0 runs it unlimited.
	HoldMemoryLimit int64
	// WorkerMemoryLimit, when not 0, runs every throughput run of the
	// worker (exactly-once) in a memory cgroup with that hard limit; an
	// OOM kill fails the run.
	WorkerMemoryLimit int64
	// Profile adds a CPU-profiled run of the exactly-once worker; HotPath
	// runs the `go test -bench` hot-path benchmarks. Both go into the doc.
	Profile bool
	HotPath bool

	// Exe and ExeEnv start a contender process: Exe with ExeArgs, then
	// "contender" and its flags, with ExeEnv added to the environment.
	Exe     string
	ExeArgs []string
	ExeEnv  []string

	WorkDir  string // state dirs, logs, profiles (created when missing)
	Doc      string // markdown report path; "" writes none
	ChartDir string // where the PNGs go (default: the doc's directory)
	// KafkaData is the kafka.sh data dir of the broker when the harness knows
	// it: its pid (for broker CPU) and log dirs (for changelog disk size).
	KafkaData string
	// RedisPort and PostgresPort: 0 picks free ports. InstallServices lets
	// the harness apt-get install them when missing.
	RedisPort, PostgresPort int
	InstallServices         bool
	RunTimeout              time.Duration // per run (default 30m)
	Command                 string        // the command line, for the doc
	Log                     io.Writer
}

// Contender is one benchmarked implementation.
type Contender struct {
	Name           string
	Label          string
	Kind           contenders.Kind
	CommitInterval time.Duration
	// ByRecord: the contender forwards every input record (no dedup), so
	// its correctness is counted per record.
	ByRecord bool
	// KeyByEvent: this contender reads an input keyed by event ID instead of
	// aggregate ID (same events), so the worker needs no re-keying loop.
	KeyByEvent bool
	// Changelog (txn pipe only): also write a changelog-sized record per
	// input record to a compacted topic in the same transaction, as the
	// worker does for every first-seen event.
	Changelog bool
	// Rekey is the worker's --rekey policy; "" is its default (always).
	Rekey string
	// Threads is the worker's --threads; 0 is its default (1).
	Threads int
	// Extra: reported beside the line-up, not judged by the targets.
	Extra bool
	// NotInSmoke leaves the row out of the smoke (SmokeContenders), where a
	// start that costs more than the run says nothing new at toy size.
	NotInSmoke bool
}

// slow reports the contenders that read the SlowRecords input: Redis and
// PostgreSQL, the inbox contender too, so that it reads the same input as
// postgres-processed, the row it is set against.
func (c Contender) slow() bool {
	return c.Kind == contenders.Redis || c.Kind == contenders.Postgres || c.Kind == contenders.PostgresInbox
}

// usesPostgres reports the contenders that need the PostgreSQL server.
func (c Contender) usesPostgres() bool {
	return c.Kind == contenders.Postgres || c.Kind == contenders.PostgresInbox
}

// recordsFor is the input size contender ct reads.
func (c *Config) recordsFor(ct Contender) int {
	if ct.slow() && c.SlowRecords > 0 && c.SlowRecords < c.Records {
		return c.SlowRecords
	}
	return c.Records
}

// Contenders is the benchmark's line-up, in report order.
func Contenders() []Contender {
	return []Contender{
		{Name: "raw-pipe", Label: "raw pipe (no state)", Kind: contenders.Raw, CommitInterval: time.Second, ByRecord: true},
		// The raw pipe in Kafka transactions, no dedup: what exactly-once
		// costs before any table (outputs counted per record, like the raw pipe).
		{Name: "txn-pipe", Label: "transactional pipe (no state), 100 ms", Kind: contenders.TxnPipe,
			CommitInterval: 100 * time.Millisecond, ByRecord: true},
		// The same with the worker's second record per event and no table:
		// what the worker's Kafka traffic costs, before its own work.
		{Name: "txn-pipe-changelog", Label: "transactional pipe + a changelog record per event (no state), 100 ms",
			Kind: contenders.TxnPipe, CommitInterval: 100 * time.Millisecond, ByRecord: true, Changelog: true, Extra: true},
		{Name: "exactly-once-100ms", Label: "this worker, exactly-once, 100 ms", Kind: contenders.Exactly, CommitInterval: 100 * time.Millisecond},
		{Name: "exactly-once-1s", Label: "this worker, exactly-once, 1 s", Kind: contenders.Exactly, CommitInterval: time.Second},
		// goka's runtime, the worker's --guarantee=best-effort. The name
		// stays: it is the id of the charts' bars and of the runs' tables.
		{Name: "at-least-once-goka", Label: "this worker, best-effort (goka)", Kind: contenders.AtLeast, CommitInterval: 100 * time.Millisecond},
		{Name: "redis-setnx", Label: "Redis SET NX EX", Kind: contenders.Redis, CommitInterval: time.Second},
		{Name: "postgres-processed", Label: "PostgreSQL processed_messages", Kind: contenders.Postgres, CommitInterval: time.Second},
		// The same business job (the order_totals upsert per first-seen
		// event, on the same server) through this worker with package inbox:
		// one database transaction per member per Kafka transaction, a
		// savepoint per event. A member works its events' statements one
		// at a time in its transaction, so the members are the parallel
		// database transactions: two, one per core of the machine the page
		// is measured on (2 cores, shared with the broker and PostgreSQL).
		// More members add transactional producers and Kafka transactions
		// and contend for the same cores: at 100 ms, one and four members
		// were not ahead of two beyond the machine's run-to-run noise; four
		// with 1 s commits were (1.3-1.8x), at a p50 latency near a second,
		// which is not this row's 100 ms. --rekey=never as the
		// other --threads 2 rows: correct for this input, where every copy
		// of an event keeps its aggregate key, so no event takes the loop.
		{Name: "postgres-inbox", Label: "this worker + PostgreSQL inbox (order_totals upsert), exactly-once, 100 ms, --rekey=never --threads 2",
			Kind: contenders.PostgresInbox, CommitInterval: 100 * time.Millisecond, Rekey: "never", Threads: 2},
		// The input is keyed by aggregate and every copy of an event keeps its
		// key, so --rekey=never is correct for it: no loop topic.
		{Name: "exactly-once-100ms-norekey", Label: "this worker, exactly-once, 100 ms, --rekey=never",
			Kind: contenders.Exactly, CommitInterval: 100 * time.Millisecond, Rekey: "never"},
		{Name: "exactly-once-100ms-2t", Label: "this worker, exactly-once, 100 ms, --threads 2",
			Kind: contenders.Exactly, CommitInterval: 100 * time.Millisecond, Threads: 2, Extra: true},
		{Name: "exactly-once-100ms-norekey-2t", Label: "this worker, exactly-once, 100 ms, --rekey=never --threads 2",
			Kind: contenders.Exactly, CommitInterval: 100 * time.Millisecond, Rekey: "never", Threads: 2},
		// The same job as a Kafka Streams application (bench/kstreams), the
		// JVM as the contender process: exactly_once_v2, a RocksDB store, the
		// worker's commit interval. "kstreams" judges each event in its input
		// partition's store (as --rekey=never), "kstreams-repartition" re-keys
		// by event ID through a repartition topic first (as --rekey=always).
		// Not in the smoke: a JVM start, 12 RocksDB stores and a rebalance
		// take about 10 s a run; kstreams-repartition there covers the same
		// application (its build, the exec and the dedup processor).
		{Name: "kstreams", Label: "Kafka Streams " + contenders.KStreamsVersion + ", exactly_once_v2, 100 ms, local store",
			Kind: contenders.KStreams, CommitInterval: 100 * time.Millisecond, Rekey: "never", NotInSmoke: true},
		{Name: "kstreams-repartition", Label: "Kafka Streams " + contenders.KStreamsVersion + ", exactly_once_v2, 100 ms, repartition by event ID",
			Kind: contenders.KStreams, CommitInterval: 100 * time.Millisecond},
	}
}

// SmokeContenders names the rows of the smoke (`bench smoke`, the smoke
// test): all but those marked NotInSmoke.
func SmokeContenders() []string {
	var out []string
	for _, ct := range Contenders() {
		if !ct.NotInSmoke {
			out = append(out, ct.Name)
		}
	}
	return out
}

// contenderNamed is the contender of Contenders() with that name; it
// panics on a name that is not there (a programming error).
func contenderNamed(name string) Contender {
	for _, ct := range Contenders() {
		if ct.Name == name {
			return ct
		}
	}
	panic("no contender " + name)
}

func (c *Config) setDefaults() {
	if c.Runs == 0 {
		c.Runs = 3
	}
	if c.Partitions == 0 {
		c.Partitions = 12
	}
	if c.PayloadBytes == 0 {
		c.PayloadBytes = 200
	}
	if len(c.Contenders) == 0 {
		for _, ct := range Contenders() {
			c.Contenders = append(c.Contenders, ct.Name)
		}
	}
	if c.LatencyWarmup == 0 {
		c.LatencyWarmup = 2 * time.Second
	}
	if c.RunTimeout == 0 {
		c.RunTimeout = 30 * time.Minute
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// Validate reports a config that cannot run (after defaults).
func (c *Config) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("no brokers"))
	}
	if c.Records <= 0 || c.Runs <= 0 || c.Partitions <= 0 {
		errs = append(errs, errors.New("records, runs and partitions must be positive"))
	}
	if c.DupRate < 0 || c.DupRate > 0.5 {
		errs = append(errs, fmt.Errorf("duplicate rate %v: want 0..0.5", c.DupRate))
	}
	if c.Rate <= 0 || c.LatencySeconds <= 0 {
		errs = append(errs, errors.New("latency rate and seconds must be positive"))
	}
	if c.SlowRecords < 0 {
		errs = append(errs, errors.New("slow records must not be negative"))
	}
	if c.RestoreRecords < 0 || c.HoldRecords < 0 {
		errs = append(errs, errors.New("restore and hold records must not be negative"))
	}
	for _, l := range []int64{c.HoldMemoryLimit, c.WorkerMemoryLimit} {
		if l < 0 || (l > 0 && l < 32<<20) {
			errs = append(errs, fmt.Errorf("memory limit %d: want 0 (none) or at least 32 MiB", l))
		}
	}
	if c.Exe == "" || c.WorkDir == "" {
		errs = append(errs, errors.New("exe and work dir are required"))
	}
	names := []string{}
	for _, ct := range Contenders() {
		names = append(names, ct.Name)
	}
	for _, n := range c.Contenders {
		if !slices.Contains(names, n) {
			errs = append(errs, fmt.Errorf("contender %q: want one of %v", n, names))
		}
	}
	return errors.Join(errs...)
}

func (c *Config) selected() []Contender {
	var out []Contender
	for _, ct := range Contenders() {
		if slices.Contains(c.Contenders, ct.Name) {
			out = append(out, ct)
		}
	}
	return out
}

func (c *Config) logf(format string, args ...any) {
	fmt.Fprintf(c.Log, "%s bench: "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}
