// Package atleastonce runs a dedup topology on goka.NewProcessor: goka's own
// at-least-once runtime with LevelDB storage. It is the comparison baseline
// for the exactly-once runtime and a fallback for brokers without
// transactions. Its windows (an output lost after the changelog was acked, a
// phantom "seen" after a local write whose changelog write failed, duplicates
// after a crash between output and offset commit) are documented in the
// README; use it knowing them.
package atleastonce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/kafkautil"
)

// Config is what the runner needs beyond the topology.
type Config struct {
	Brokers        []string
	StateDir       string        // LevelDB files, one directory per partition
	CommitInterval time.Duration // sarama's offset auto-commit interval
	Replication    int16         // for created topics; -1 = broker default
	ClientID       string
	Logger         *slog.Logger
	// TableSize, when set, is told each partition's number of seen records.
	TableSize func(partition int32, n int64)
}

// Validate reports a config that cannot run.
func (c Config) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("no brokers"))
	}
	if c.StateDir == "" {
		errs = append(errs, errors.New("state dir is empty"))
	}
	if c.CommitInterval <= 0 {
		errs = append(errs, errors.New("commit interval must be positive"))
	}
	return errors.Join(errs...)
}

// Runner owns one goka processor.
type Runner struct {
	cfg  Config
	topo *dedup.Topology
	proc *goka.Processor
}

// SaramaConfig is the client configuration of the at-least-once mode.
func SaramaConfig(cfg Config) *sarama.Config {
	sc := goka.DefaultConfig()
	sc.Version = kafkautil.SaramaVersion
	sc.ClientID = cfg.ClientID
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	sc.Consumer.Offsets.AutoCommit.Enable = true
	sc.Consumer.Offsets.AutoCommit.Interval = cfg.CommitInterval
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Producer.Idempotent = true
	sc.Net.MaxOpenRequests = 1
	return sc
}

// New validates the config, creates the topics the group writes when
// missing and builds the goka processor. ctx ends the wait for an
// unreachable cluster, like processor.New's.
func New(ctx context.Context, cfg Config, topo *dedup.Topology) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := topo.Validate(); err != nil {
		return nil, err
	}
	if topo.Rekey == dedup.RekeyNever {
		return nil, errors.New("rekey never: goka's context reads the table only under the record key; use the exactly-once runtime")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.TableSize == nil {
		cfg.TableSize = func(int32, int64) {}
	}
	sc := SaramaConfig(cfg)
	if err := prepareTopics(ctx, cfg, sc, topo); err != nil {
		return nil, err
	}
	build := countingBuilder(storage.DefaultBuilder(cfg.StateDir), func(_ string, p int32, n int64) { cfg.TableSize(p, n) })
	proc, err := goka.NewProcessor(cfg.Brokers, topo.Graph(),
		goka.WithStorageBuilder(build),
		goka.WithTopicManagerBuilder(ownedTopicsBuilder(sc, cfg.Logger)),
		goka.WithConsumerGroupBuilder(goka.ConsumerGroupBuilderWithConfig(sc)),
		goka.WithConsumerSaramaBuilder(goka.SaramaConsumerBuilderWithConfig(sc)),
		goka.WithProducerBuilder(goka.ProducerBuilderWithConfig(sc)),
		goka.WithNilHandling(goka.NilProcess),
		goka.WithClientID(cfg.ClientID),
		goka.WithLogger(slogPrinter{cfg.Logger}),
	)
	if err != nil {
		return nil, fmt.Errorf("build goka processor: %w", err)
	}
	return &Runner{cfg: cfg, topo: topo, proc: proc}, nil
}

// Run processes until ctx is cancelled or the processor fails.
func (r *Runner) Run(ctx context.Context) error {
	r.cfg.Logger.Info("at-least-once processor starting", "group", r.topo.Group, "input", r.topo.Input,
		"table", r.topo.TableTopic(), "stateDir", r.cfg.StateDir)
	err := r.proc.Run(ctx)
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("goka processor: %w", err)
	}
	return nil
}

// Get reads key from the local table (goka hashes it to its partition); it
// fails when another instance holds that partition.
func (r *Runner) Get(key string) (any, error) { return r.proc.Get(key) }

// Ready reports whether every assigned partition's table is recovered.
func (r *Runner) Ready() bool { return r.proc.Recovered() }

// slogPrinter adapts slog to goka's printf-style logger.
type slogPrinter struct{ l *slog.Logger }

func (p slogPrinter) Print(args ...any)   { p.l.Info(fmt.Sprint(args...), "component", "goka") }
func (p slogPrinter) Println(args ...any) { p.l.Info(fmt.Sprint(args...), "component", "goka") }
func (p slogPrinter) Printf(format string, args ...any) {
	p.l.Info(fmt.Sprintf(format, args...), "component", "goka")
}
