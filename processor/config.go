// Package processor is the exactly-once runtime: it runs a dedup topology's
// goka callback with the seen-ID update, the outputs and the input offset in
// one Kafka transaction (Kafka Streams' exactly_once_v2, KIP-447).
//
// Per consumer-group member ("thread"): a sarama group member reading
// read_committed with goka's copartitioning strategy and auto-commit off; one
// transactional producer whose transactional.id is stable across restarts of
// the instance; per partition a LevelDB store with an in-memory overlay that
// is applied only after the transaction committed. A transaction commits in
// a goroutine while the member processes the next one, whose records wait
// until the commit succeeded (commit.go). See
// ../shared/design/ARCHITECTURE.md, "The exactly-once runtime".
package processor

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/IBM/sarama"
	"github.com/dedupkit/dedup/internal/kafkautil"
	"github.com/dedupkit/dedup/security"
)

// Config configures the runtime. Zero values take the defaults below.
type Config struct {
	Brokers  []string
	StateDir string // LevelDB stores and the persisted instance id
	// Security is how every client connects (TLS, SASL); zero: plaintext.
	Security security.Config

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

	Logger *slog.Logger
	Hooks  Hooks // nil: NopHooks

	// BeforeCommit, when set, runs after a transaction's records were sent
	// and before its offsets and commit. A non-nil error makes the member
	// stop dead, as if the process crashed there. For fault-injection tests.
	BeforeCommit func() error

	// secure sets Security on each client config (loaded once by New).
	secure func(*sarama.Config)
}

func (c *Config) setDefaults() {
	if c.CommitInterval == 0 {
		c.CommitInterval = 100 * time.Millisecond
	}
	if c.Threads == 0 {
		c.Threads = 1
	}
	if c.TransactionTimeout == 0 {
		c.TransactionTimeout = 10 * time.Second
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = 10 * time.Second
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
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	// Error attributes name Kafka's error codes (PRODUCER_FENCED, ...).
	c.Logger = kafkautil.NamingLogger(c.Logger)
	if c.Hooks == nil {
		c.Hooks = NopHooks{}
	}
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
	if c.TransactionTimeout < time.Second {
		errs = append(errs, fmt.Errorf("transaction timeout %v: at least 1s", c.TransactionTimeout))
	}
	if err := c.Security.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Hooks receive the runtime's events; the metrics package implements them.
// Calls come from every member's goroutines.
type Hooks interface {
	TxnCommitted(took time.Duration, records int)
	TxnAborted(reason string)
	// CommitStalled tells that a commit has run for another transaction
	// timeout (commit_watch.go).
	CommitStalled()
	Fenced()
	Rebalanced()
	RestoreProgress(partition int32, restored, remaining int64)
	TableSize(partition int32, entries int64)
	// KeyFilterBytes is the memory of a partition's key filter
	// (keyfilter.go), told with its TableSize.
	KeyFilterBytes(partition int32, bytes int)
	Swept(partition int32, deleted int)
	// PartitionRevoked tells that the member closed the partition's table
	// (revoked by a rebalance, or the worker stopping): what was reported
	// for it is another member's to report now, so per-partition series
	// should be dropped, not left at their last value to be summed twice.
	PartitionRevoked(partition int32)
}

// NopHooks ignores everything.
type NopHooks struct{}

func (NopHooks) TxnCommitted(time.Duration, int)     {}
func (NopHooks) TxnAborted(string)                   {}
func (NopHooks) CommitStalled()                      {}
func (NopHooks) Fenced()                             {}
func (NopHooks) Rebalanced()                         {}
func (NopHooks) RestoreProgress(int32, int64, int64) {}
func (NopHooks) TableSize(int32, int64)              {}
func (NopHooks) KeyFilterBytes(int32, int)           {}
func (NopHooks) Swept(int32, int)                    {}
func (NopHooks) PartitionRevoked(int32)              {}
