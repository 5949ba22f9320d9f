// Package contenders holds the benchmark's contenders: the same job (read the
// input, drop duplicate events, write each event once to the output) done by
// a raw pipe with no state (the ceiling), by the same pipe in Kafka
// transactions (what transactions cost), by this project's worker in
// its two runtimes, and by the two patterns it replaces, Redis SET NX and a
// processed_messages table in PostgreSQL; and, with the PostgreSQL pattern's
// business upsert as its handler's database work, by the worker with package
// inbox (postgres-inbox). Each one runs in its own process (see Main) so the
// harness can read its CPU time and peak RSS from /proc.
package contenders

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/dedupkit/dedup/processor"
)

// Kind names a contender implementation.
type Kind string

const (
	Raw      Kind = "raw"      // sarama consumer group -> async producer, no state
	TxnPipe  Kind = "txn"      // the same, exactly-once by Kafka transactions, no state
	Exactly  Kind = "eos"      // this worker, processor.New (exactly-once)
	AtLeast  Kind = "alo"      // this worker, atleastonce.New (goka)
	Redis    Kind = "redis"    // SET key NX EX ttl before the handler
	Postgres Kind = "postgres" // processed_messages + business upsert per transaction
	// PostgresInbox is this worker (exactly-once) with package inbox's
	// handler doing postgres's business upsert in PostgreSQL: one database
	// transaction per member per Kafka transaction.
	PostgresInbox Kind = "postgres-inbox"
	KStreams      Kind = "kstreams" // the same job as a Kafka Streams application (bench/kstreams)
	// Parallel is Confluent's Parallel Consumer in its transactional mode
	// (bench/kstreams's ParallelSleep): the slow-handler benchmark's sleeping
	// forward, no dedup state.
	Parallel Kind = "parallel"
)

// Kinds lists every kind.
var Kinds = []Kind{Raw, TxnPipe, Exactly, AtLeast, Redis, Postgres, PostgresInbox, KStreams, Parallel}

// Config is one contender process's job.
type Config struct {
	Kind    Kind
	Brokers []string
	Input   string
	Output  string
	Group   string // consumer group; also the Redis key prefix and consumer_name
	// StateDir holds the worker's LevelDB tables (eos, alo, postgres-inbox).
	StateDir string
	// CommitInterval: the worker's transaction (eos, postgres-inbox) or
	// offset commit (alo, raw, redis, postgres) interval.
	CommitInterval time.Duration
	// Rekey is the worker's --rekey policy (eos, postgres-inbox); "" is the
	// default, always.
	// For kstreams, never is the "local" mode and anything else "repartition".
	Rekey string
	// Threads is the worker's --threads (eos, postgres-inbox: members, each
	// with its own database transaction) or num.stream.threads (kstreams);
	// 0 is the default, 1.
	Threads int
	// InstanceID is the static group member's identity: the worker's
	// --instance-id (eos; also its transactional identity; "" is the one
	// persisted in StateDir) or group.instance.id (kstreams; "": none).
	// SessionTimeout is the group session timeout (0: the worker's default,
	// 10 s; Kafka Streams' 45 s). The failover benchmark sets both per
	// instance. StandbyReplicas is the worker's --standby-replicas (eos) or
	// Kafka Streams' num.standby.replicas.
	InstanceID      string
	SessionTimeout  time.Duration
	StandbyReplicas int
	// Sleep (eos, kstreams, parallel) makes the handler sleep that long
	// (honouring its ctx, for the worker) before it forwards the event: the
	// slow handler of docs/benchmarks-slow.md. 0: no sleep.
	Sleep time.Duration
	// Concurrency is the worker's dedup.Concurrency (eos) or the Parallel
	// Consumer's maxConcurrency (parallel); 0 is the default (the worker's 1).
	Concurrency int
	// Changelog (txn only): a topic the pipe also writes a changelog-sized
	// record to for every input record, in the same transaction.
	Changelog   string
	RedisAddr   string
	RedisTTL    time.Duration // the SET NX expiry
	PostgresDSN string        // postgres, postgres-inbox
	Logger      *slog.Logger
	// Hooks (eos only) receives the runtime's events (restore progress).
	Hooks []processor.Hook
	// Leave (eos only), once closed, makes the worker stop for good: it
	// leaves the group after its last commit (SIGUSR1 in Main).
	Leave <-chan struct{}
	// InboxStats (postgres-inbox only), unless nil, gets the process's
	// database times when the worker has stopped.
	InboxStats func(InboxStats)
}

// Validate reports a config that cannot run.
func (c *Config) Validate() error {
	var errs []error
	known := false
	for _, k := range Kinds {
		known = known || c.Kind == k
	}
	if !known {
		errs = append(errs, fmt.Errorf("kind %q: want one of %v", c.Kind, Kinds))
	}
	if len(c.Brokers) == 0 || c.Input == "" || c.Output == "" || c.Group == "" {
		errs = append(errs, errors.New("brokers, input, output and group are required"))
	}
	if c.CommitInterval <= 0 {
		errs = append(errs, errors.New("commit interval must be positive"))
	}
	if c.Sleep < 0 || c.Concurrency < 0 {
		errs = append(errs, errors.New("sleep and concurrency must not be negative"))
	}
	switch c.Kind {
	case Exactly, AtLeast, KStreams, Parallel, PostgresInbox:
		if c.StateDir == "" {
			errs = append(errs, errors.New("state dir is required for the worker and Kafka Streams"))
		}
	case Redis:
		if c.RedisAddr == "" || c.RedisTTL <= 0 {
			errs = append(errs, errors.New("redis address and a positive TTL are required"))
		}
	}
	switch c.Kind {
	case Postgres, PostgresInbox:
		if c.PostgresDSN == "" {
			errs = append(errs, errors.New("postgres DSN is required"))
		}
	}
	return errors.Join(errs...)
}

// Run runs the contender until ctx is done. ready is called once, when the
// contender holds its partitions and consumes (for the worker: once every
// partition's table is restored).
func Run(ctx context.Context, cfg Config, ready func()) error {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("contender: %w", err)
	}
	switch cfg.Kind {
	case Exactly, AtLeast, PostgresInbox:
		return runWorker(ctx, cfg, ready)
	case Raw:
		return runPipe(ctx, cfg, passThrough{}, ready)
	case TxnPipe:
		return runTxnPipe(ctx, cfg, ready)
	case KStreams, Parallel:
		return fmt.Errorf("contender: %s runs as a JVM of its own: Main execs it, Run cannot", cfg.Kind)
	case Redis:
		st, err := newRedisStage(ctx, cfg)
		if err != nil {
			return err
		}
		defer st.Close()
		return runPipe(ctx, cfg, st, ready)
	default:
		st, err := newPostgresStage(ctx, cfg)
		if err != nil {
			return err
		}
		defer st.Close()
		return runPipe(ctx, cfg, st, ready)
	}
}
