package processor

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupkit/dedup/internal/checks"
	"github.com/dedupkit/dedup/internal/kafkautil"
)

// Config configures the runtime. Zero values take the defaults below.
type Config struct {
	Brokers  []string
	StateDir string // LevelDB stores and the persisted instance id
	// Security is how every client connects (TLS, SASL); zero: plaintext.
	Security Security

	// CommitInterval is how often a transaction is committed (default 100ms).
	CommitInterval time.Duration
	// Threads is the number of group members in this process (default 1).
	Threads int
	// InstanceID names this instance in transactional ids and static group
	// membership; empty means the id persisted in StateDir (created once).
	InstanceID string
	// Replication of the topics the runtime creates; -1 = broker default.
	Replication int16
	// TransactionTimeout bounds how long a dead instance's open transaction
	// blocks read_committed readers (default 10s).
	TransactionTimeout time.Duration
	// SessionTimeout of the group membership (default 10s).
	SessionTimeout time.Duration
	// FenceStuckAfter is how long a transaction of another instance of
	// the group may stay open before a member it blocks fences it, taking
	// it for a dead instance's. Zero: DefaultFenceStuckAfter, or
	// twice the commit interval when that is longer; it must exceed the
	// commit interval. At
	// TransactionTimeout or more it is never fenced early: the group's
	// leader fences it a session timeout after the death, or the
	// coordinator aborts it.
	FenceStuckAfter time.Duration
	// PeerAddr is where the instance listens (host:port; port 0: any free
	// one) for the liveness connections of the group's other instances
	// Each holds one to every other; when one ends and the
	// address then refuses, that instance's process is gone (kill -9, a
	// crash) and its open transactions are aborted at once, instead of
	// after FenceStuckAfter. Since such a connection can abort another
	// instance's transactions, it needs PeerSecret. Every instance of the
	// group listens on the same port (of PeerAdvertise when set): an
	// instance dials no other port. Port 0 gives each a port of its own
	// and lifts that rule (several instances on one host). Empty: off, no
	// port opened.
	PeerAddr string
	// PeerAdvertise is the host:port the other instances dial. Empty:
	// PeerAddr's host when it names one, otherwise this host's address on
	// its route to the brokers, with the port PeerAddr got.
	PeerAdvertise string
	// PeerSecret is the group's shared secret, at least MinPeerSecret
	// bytes, the same on every instance: both ends of every liveness
	// connection prove they know it before either says who it is
	// so that nobody without it can learn the group's
	// instances or make them abort each other's transactions. Required
	// with PeerAddr; keep it out of command lines and logs.
	PeerSecret []byte
	// LeaveGroupOnStop makes every clean stop (Run's context cancelled) a
	// stop for good: once the members committed and closed, they are
	// removed from the group, so the other instances take their partitions
	// at once rather than after SessionTimeout. Off by default: a plain
	// stop is taken for a restart, which static membership serves by
	// giving the instance its partitions back without a rebalance.
	// Processor.LeaveGroupOnStop asks it for one stop.
	LeaveGroupOnStop bool
	// StandbyReplicas is how many other instances keep a copy of each
	// partition's table up to date by tailing its changelog (default 0,
	// at most MaxStandbyReplicas). With one, an instance that dies or
	// leaves hands its partitions to instances that restore only the
	// tail, and an instance that joins takes partitions over only once it
	// has caught up on them (warm-up), so neither pauses for a restore of
	// the whole table. Each copy costs its instance the disk and about
	// the memory of an owned partition. Give every instance of a group
	// the same value: the group's leader plans with its own.
	StandbyReplicas int
	// MaxBatch commits early once a transaction holds this many produced
	// records (default 20000), bounding memory and transaction size.
	MaxBatch int
	// SweepInterval is how often the sweeper scans a sixtieth of each
	// partition's records for expired ones (default 1m, so a record goes
	// about an hour after it expired); SweepBatch bounds the deletions per
	// partition per sweep (default 1000); a full batch sweeps again at the
	// next commit.
	SweepInterval time.Duration
	SweepBatch    int

	// Health: Ready turns false once a member aborted
	// ReadyAbortLimit transactions in a row (default 5) or has held
	// consumed records uncommitted for ReadyStallAfter; Live turns false
	// after LiveStallAfter, for an orchestrator to restart the worker
	// (defaults: DefaultReadyStallAfter or the commit interval plus the
	// transaction timeout, when longer; DefaultLiveStallAfter or twice the
	// ready bound). ReadyStallAfter must exceed the commit
	// interval and the transaction timeout (a commit may take that long
	// before the coordinator aborts it), LiveStallAfter ReadyStallAfter.
	ReadyAbortLimit int
	ReadyStallAfter time.Duration
	LiveStallAfter  time.Duration

	Logger *slog.Logger
	// Registerer, when set, gets the worker's Prometheus metrics: the
	// topology's outcomes and the runtime's (docs/operations.md lists
	// them). A *prometheus.Registry also serves them on HTTPHandler's
	// /metrics.
	Registerer prometheus.Registerer
	// Hooks are told the runtime's events; see Hook.
	Hooks []Hook

	// beforeCommit is a test's fault point (internal/faults).
	beforeCommit func() error
	// secure sets Security on each client config (loaded once by New).
	secure func(*sarama.Config)
	// maxRecord is the producer's largest record (recordLimit).
	maxRecord int
}

// Defaults of Config, shared with the worker binary's flags.
const (
	DefaultCommitInterval = 100 * time.Millisecond
	DefaultSessionTimeout = 10 * time.Second
)

func (c *Config) setDefaults() {
	if c.CommitInterval == 0 {
		c.CommitInterval = DefaultCommitInterval
	}
	if c.Threads == 0 {
		c.Threads = 1
	}
	if c.TransactionTimeout == 0 {
		c.TransactionTimeout = DefaultTransactionTimeout
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = 20000
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = time.Minute
	}
	if c.SweepBatch == 0 {
		c.SweepBatch = 1000
	}
	if c.Replication == 0 {
		c.Replication = -1
	}
	if c.ReadyAbortLimit == 0 {
		c.ReadyAbortLimit = DefaultReadyAbortLimit
	}
	c.ReadyStallAfter, c.LiveStallAfter = checks.StallBounds(c.CommitInterval, c.TransactionTimeout, c.ReadyStallAfter, c.LiveStallAfter)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	// Error attributes name Kafka's error codes (PRODUCER_FENCED, ...).
	c.Logger = kafkautil.NamingLogger(c.Logger)
}

// Validate reports a config that cannot run (after defaults).
func (c *Config) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("no brokers"))
	}
	if c.StateDir == "" {
		errs = append(errs, errors.New("state dir is empty"))
	}
	if c.CommitInterval < 0 || c.Threads < 0 || c.MaxBatch < 0 || c.SweepInterval < 0 || c.SweepBatch < 0 {
		errs = append(errs, errors.New("commit interval, threads, max batch and sweep must not be negative"))
	}
	if err := checks.InstanceID(c.InstanceID); err != nil {
		errs = append(errs, err)
	}
	if c.StandbyReplicas < 0 || c.StandbyReplicas > MaxStandbyReplicas {
		errs = append(errs, fmt.Errorf("standby replicas %d: want 0 to %d", c.StandbyReplicas, MaxStandbyReplicas))
	}
	if c.TransactionTimeout < time.Second {
		errs = append(errs, fmt.Errorf("transaction timeout %v: at least 1s", c.TransactionTimeout))
	}
	if c.ReadyAbortLimit < 1 {
		errs = append(errs, fmt.Errorf("ready abort limit %d: at least 1", c.ReadyAbortLimit))
	}
	if floor := max(c.CommitInterval, c.TransactionTimeout); c.ReadyStallAfter <= floor {
		errs = append(errs, fmt.Errorf("ready stall bound %v: must exceed the commit interval and the transaction timeout (%v)",
			c.ReadyStallAfter, floor))
	}
	if c.LiveStallAfter <= c.ReadyStallAfter {
		errs = append(errs, fmt.Errorf("live stall bound %v: must exceed the ready stall bound %v", c.LiveStallAfter, c.ReadyStallAfter))
	}
	if err := checks.Peers(c.PeerAddr, c.PeerAdvertise, c.PeerSecret); err != nil {
		errs = append(errs, err)
	}
	if err := c.Security.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// The health bounds' defaults. A healthy worker commits every commit
// interval; a commit that waits for a broker is aborted by the coordinator
// after the transaction timeout (10s by default). Thirty seconds of records
// waiting for their commit is well past that; five minutes leaves an operator time to see the alert before
// the orchestrator restarts the worker. A rebalance or a broker failover
// aborts the transaction in flight and the next one commits; five in a row
// means every one fails, and take a few seconds when a record aborts every
// transaction (TestHealthOfAWorkerThatCannotCommit).
//
// A long commit interval raises the ready bound's default to the interval
// plus the transaction timeout (records wait for the interval's end, then
// for the commit), and the live bound's to twice the ready bound.
const (
	DefaultTransactionTimeout = 10 * time.Second
	DefaultReadyAbortLimit    = 5
	DefaultReadyStallAfter    = checks.ReadyStallAfter
	DefaultLiveStallAfter     = checks.LiveStallAfter
)
