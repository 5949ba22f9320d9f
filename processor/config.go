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
	// InstanceID names this instance in transactional ids and static group
	// membership; empty means the id persisted in StateDir (created once).
	InstanceID string
	// Threads is the number of group members in this process (default 1).
	Threads int
	// Replication of the topics the runtime creates; -1 = broker default.
	Replication int16

	Transactions Transactions
	Group        Group
	Peers        Peers
	Sweep        Sweep
	Health       HealthBounds

	Logger *slog.Logger
	// Registerer, when set, gets the worker's Prometheus metrics: the
	// topology's outcomes and the runtime's (docs/operations.md lists
	// them). A *prometheus.Registry also serves them on HTTPHandler's
	// /metrics.
	Registerer prometheus.Registerer
	// Hooks are told the runtime's events; see Hook.
	Hooks []Hook

	internal wiring // set by New, never by a user
}

// Transactions sets how the members commit.
type Transactions struct {
	// CommitInterval is how often a transaction is committed (default 100ms).
	CommitInterval time.Duration
	// MaxBatch commits early once a transaction holds this many produced
	// records (default 20000), bounding memory and transaction size.
	MaxBatch int
	// Timeout bounds how long a dead instance's open transaction
	// blocks read_committed readers (default 10s).
	Timeout time.Duration
	// FenceStuckAfter is how long a transaction of another instance of
	// the group may stay open before a member it blocks fences it, taking
	// it for a dead instance's. Zero: DefaultFenceStuckAfter, or twice the
	// commit interval when that is longer; it must exceed the commit
	// interval. At Timeout or more it is never fenced early: the group's
	// leader fences it a session timeout after the death, or the
	// coordinator aborts it.
	FenceStuckAfter time.Duration
}

// Group sets the instance's membership of its consumer group.
type Group struct {
	// SessionTimeout of the group membership (default 10s).
	SessionTimeout time.Duration
	// LeaveOnStop makes every clean stop (Run's context cancelled) a
	// stop for good: once the members committed and closed, they are
	// removed from the group, so the other instances take their partitions
	// at once rather than after SessionTimeout. Off by default: a plain
	// stop is taken for a restart, which static membership serves by
	// giving the instance its partitions back without a rebalance.
	// Processor.LeaveGroupOnStop asks it for one stop.
	LeaveOnStop bool
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
}

// Peers sets the liveness connections between the group's instances.
type Peers struct {
	// Addr is where the instance listens (host:port; port 0: any free
	// one) for the liveness connections of the group's other instances.
	// Each holds one to every other; when one ends and the address then
	// refuses, that instance's process is gone (kill -9, a crash) and its
	// open transactions are aborted at once, instead of after
	// Transactions.FenceStuckAfter. Since such a connection can abort
	// another instance's transactions, it needs Secret. Every instance of
	// the group listens on the same port (of Advertise when set): an
	// instance dials no other port. Port 0 gives each a port of its own
	// and lifts that rule (several instances on one host). Empty: off, no
	// port opened.
	Addr string
	// Advertise is the host:port the other instances dial. Empty: Addr's
	// host when it names one, otherwise this host's address on its route
	// to the brokers, with the port Addr got.
	Advertise string
	// Secret is the group's shared secret, at least MinPeerSecret bytes,
	// the same on every instance: both ends of every liveness connection
	// prove they know it before either says who it is, so that nobody
	// without it can learn the group's instances or make them abort each
	// other's transactions. Required with Addr; keep it out of command
	// lines and logs.
	Secret []byte
}

// Sweep sets the deletion of expired seen IDs: every Interval (default
// 1m) the sweeper scans a sixtieth of each partition's records for expired
// ones, so a record goes about an hour after it expired; Batch bounds the
// deletions per partition per sweep (default 1000); a full batch sweeps
// again at the next commit.
type Sweep struct {
	Interval time.Duration
	Batch    int
}

// HealthBounds set when Ready and Live turn false. Ready turns false once
// a member aborted ReadyAbortLimit transactions in a row (default 5) or
// has held consumed records uncommitted for ReadyStallAfter; Live turns
// false after LiveStallAfter, for an orchestrator to restart the worker
// (defaults: DefaultReadyStallAfter or the commit interval plus the
// transaction timeout, when longer; DefaultLiveStallAfter or twice the
// ready bound). ReadyStallAfter must exceed the commit interval and the
// transaction timeout (a commit may take that long before the coordinator
// aborts it), LiveStallAfter ReadyStallAfter.
type HealthBounds struct {
	ReadyAbortLimit int
	ReadyStallAfter time.Duration
	LiveStallAfter  time.Duration
}

// wiring is what New works out for the members from the Config.
type wiring struct {
	// beforeCommit, afterResources and afterCommit are a test's fault
	// points (internal/faults).
	beforeCommit, afterResources, afterCommit func() error
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
	if c.Transactions.CommitInterval == 0 {
		c.Transactions.CommitInterval = DefaultCommitInterval
	}
	if c.Threads == 0 {
		c.Threads = 1
	}
	if c.Transactions.Timeout == 0 {
		c.Transactions.Timeout = DefaultTransactionTimeout
	}
	if c.Group.SessionTimeout == 0 {
		c.Group.SessionTimeout = DefaultSessionTimeout
	}
	if c.Transactions.MaxBatch == 0 {
		c.Transactions.MaxBatch = 20000
	}
	if c.Sweep.Interval == 0 {
		c.Sweep.Interval = time.Minute
	}
	if c.Sweep.Batch == 0 {
		c.Sweep.Batch = 1000
	}
	if c.Replication == 0 {
		c.Replication = -1
	}
	if c.Health.ReadyAbortLimit == 0 {
		c.Health.ReadyAbortLimit = DefaultReadyAbortLimit
	}
	c.Health.ReadyStallAfter, c.Health.LiveStallAfter = checks.StallBounds(c.Transactions.CommitInterval, c.Transactions.Timeout, c.Health.ReadyStallAfter, c.Health.LiveStallAfter)
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
	if c.Transactions.CommitInterval < 0 || c.Threads < 0 || c.Transactions.MaxBatch < 0 || c.Sweep.Interval < 0 || c.Sweep.Batch < 0 {
		errs = append(errs, errors.New("commit interval, threads, max batch and sweep must not be negative"))
	}
	if err := checks.InstanceID(c.InstanceID); err != nil {
		errs = append(errs, err)
	}
	if c.Group.StandbyReplicas < 0 || c.Group.StandbyReplicas > MaxStandbyReplicas {
		errs = append(errs, fmt.Errorf("standby replicas %d: want 0 to %d", c.Group.StandbyReplicas, MaxStandbyReplicas))
	}
	if c.Transactions.Timeout < time.Second {
		errs = append(errs, fmt.Errorf("transaction timeout %v: at least 1s", c.Transactions.Timeout))
	}
	if c.Health.ReadyAbortLimit < 1 {
		errs = append(errs, fmt.Errorf("ready abort limit %d: at least 1", c.Health.ReadyAbortLimit))
	}
	if floor := max(c.Transactions.CommitInterval, c.Transactions.Timeout); c.Health.ReadyStallAfter <= floor {
		errs = append(errs, fmt.Errorf("ready stall bound %v: must exceed the commit interval and the transaction timeout (%v)",
			c.Health.ReadyStallAfter, floor))
	}
	if c.Health.LiveStallAfter <= c.Health.ReadyStallAfter {
		errs = append(errs, fmt.Errorf("live stall bound %v: must exceed the ready stall bound %v", c.Health.LiveStallAfter, c.Health.ReadyStallAfter))
	}
	if err := checks.Peers(c.Peers.Addr, c.Peers.Advertise, c.Peers.Secret); err != nil {
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
