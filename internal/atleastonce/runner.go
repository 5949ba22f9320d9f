// Package atleastonce runs a dedup topology on goka.NewProcessor: goka's own
// runtime with LevelDB storage, the worker's --guarantee=best-effort. Despite
// the package's name it is not at-least-once: goka marks an event seen
// (LevelDB and changelog) in the callback while the output is emitted
// asynchronously, so a crash or kill after the mark is durable and before the
// output is acknowledged loses the output (the event, consumed again, is
// judged a duplicate); a crash between output and offset commit outputs it
// twice; a local write whose changelog write failed leaves a phantom "seen".
// A crash or kill can therefore lose or duplicate events
// (TestBestEffortUnderSIGKILLFigures and `make chaos` measure how many). It is
// the comparison baseline for the exactly-once runtime and a fallback for
// brokers without transactions; use it knowing that.
package atleastonce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/engine"
	"github.com/dedupkit/dedup/internal/kafkautil"
	"github.com/dedupkit/dedup/internal/leveldbx"
	"github.com/dedupkit/dedup/processor"
)

// Config is what the runner needs beyond the topology.
type Config struct {
	Brokers        []string
	Security       processor.Security // how every client connects (TLS, SASL); zero: plaintext
	StateDir       string             // LevelDB files, one directory per partition
	CommitInterval time.Duration      // sarama's offset auto-commit interval
	Replication    int16              // for created topics; -1 = broker default
	ClientID       string
	Logger         *slog.Logger
	// TableSize, when set, is told each partition's number of seen records.
	TableSize func(partition int32, n int64)
	// TableClosed, when set, is told that goka closed a partition's table
	// (revoked, or the processor stopping): its size and its consumer lag
	// are no longer ours. It is also told when a partition that never
	// opened its table leaves.
	TableClosed func(partition int32)
	// ConsumerLag, when set, is told every second the records of each held
	// input and loop partition not processed yet (lag.go says how they are
	// counted). Nothing is told of a partition after its TableClosed.
	ConsumerLag func(topic string, partition int32, records int64)
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
	if err := c.Security.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Runner owns one goka processor at a time (see Run).
type Runner struct {
	cfg  Config
	topo *dedup.Topology
	sc   *sarama.Config
	proc atomic.Pointer[gokaProcessor] // replaced by Run, read by Get and Ready
	// newProc builds a processor: build, or a fake in tests.
	newProc func() (gokaProcessor, error)
	// firstBackoff is the first pause before a new processor (firstRestartBackoff).
	firstBackoff time.Duration
	lag          *lagWatch
	// newLagOffsets connects the lag watch (newKafkaOffsets); nil when
	// nothing takes the lag.
	newLagOffsets func() (lagOffsets, error)
}

// gokaProcessor is what the runner uses of a *goka.Processor.
type gokaProcessor interface {
	Run(ctx context.Context) error
	Get(key string) (any, error)
	Recovered() bool
}

// SaramaConfig is the client configuration of the best-effort mode.
func SaramaConfig(cfg Config) (*sarama.Config, error) {
	sc := goka.DefaultConfig()
	if err := cfg.Security.Apply(sc); err != nil {
		return nil, err
	}
	sc.Version = kafkautil.SaramaVersion
	sc.ClientID = cfg.ClientID
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	sc.Consumer.Offsets.AutoCommit.Enable = true
	sc.Consumer.Offsets.AutoCommit.Interval = cfg.CommitInterval
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Producer.Idempotent = true
	sc.Net.MaxOpenRequests = 1
	return sc, nil
}

// New validates the config, creates the topics the group writes when
// missing and builds the goka processor. ctx ends the wait for an
// unreachable cluster, like processor.New's. Errors name Kafka's error
// codes (kafkautil.Named).
func New(ctx context.Context, cfg Config, topo *dedup.Topology) (*Runner, error) {
	r, err := newRunner(ctx, cfg, topo)
	return r, kafkautil.Named(err)
}

func newRunner(ctx context.Context, cfg Config, topo *dedup.Topology) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := topo.Validate(); err != nil {
		return nil, err
	}
	if topo.Rekey == dedup.RekeyNever {
		return nil, errors.New("rekey never: goka's context reads the table only under the record key; use the exactly-once runtime")
	}
	if topo.Concurrency > 1 {
		return nil, fmt.Errorf("concurrency %d: goka's runtime runs a partition's handler calls one at a time; use the exactly-once runtime", topo.Concurrency)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// Error attributes name Kafka's error codes (PRODUCER_FENCED, ...).
	cfg.Logger = kafkautil.NamingLogger(cfg.Logger)
	if cfg.TableSize == nil {
		cfg.TableSize = func(int32, int64) {}
	}
	if cfg.TableClosed == nil {
		cfg.TableClosed = func(int32) {}
	}
	wantLag := cfg.ConsumerLag != nil
	if !wantLag {
		cfg.ConsumerLag = func(string, int32, int64) {}
	}
	sc, err := SaramaConfig(cfg)
	if err != nil {
		return nil, err
	}
	if err := prepareTopics(ctx, cfg, sc, topo); err != nil {
		return nil, err
	}
	r := &Runner{cfg: cfg, topo: topo, sc: sc, firstBackoff: firstRestartBackoff,
		lag: newLagWatch(append(slices.Clone(topo.Inputs), topo.LoopTopic()), cfg.ConsumerLag, cfg.TableClosed, cfg.Logger)}
	r.newProc = r.build
	if wantLag { // without a taker, no client reads the offsets every second
		r.newLagOffsets = func() (lagOffsets, error) {
			k, err := newKafkaOffsets(cfg.Brokers, sc, topo.Group)
			if err != nil {
				return nil, err // not a nil *kafkaOffsets in the interface
			}
			return k, nil
		}
	}
	proc, err := r.newProc()
	if err != nil {
		return nil, err
	}
	r.proc.Store(&proc)
	return r, nil
}

// build makes a goka processor; Run makes a new one after a transient failure.
func (r *Runner) build() (gokaProcessor, error) {
	cfg, sc := r.cfg, r.sc
	build := countingBuilder(cfg.StateDir, cfg.Logger,
		func(_ string, p int32, n int64) { cfg.TableSize(p, n) },
		func(_ string, p int32) { r.lag.closed(p) })
	// The topology dead-letters an event whose records are larger than the
	// producer sends: a refused emit would stop the processor, and fail
	// again after every restart.
	proc, err := goka.NewProcessor(cfg.Brokers, engine.Graph(r.topo, sc.Producer.MaxMessageBytes, r.lag.processed),
		goka.WithStorageBuilder(build),
		goka.WithRebalanceCallback(r.lag.assigned),
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
	return proc, nil
}

// Backoff between goka processors after a transient failure; reset after a
// processor that ran for restartReset.
const (
	firstRestartBackoff = time.Second
	maxRestartBackoff   = 30 * time.Second
	restartReset        = time.Minute
)

// Run processes until ctx is cancelled or the processor fails for good.
//
// goka ends its processor on any consumer-group error, and a group
// coordinator's broker dying is one (EOF, connection refused): in a
// `make chaos` run every worker of the group exited on each of the two broker
// kills. Those errors are transient (kafkautil.Transient), so Run builds a
// new goka processor, which reopens the tables from the state dir and rejoins
// the group, as a restarted process would. So it does when the processor
// failed on a table store that LevelDB finds damaged (failedOnDamage): the
// new processor's storage builder replaces that store. Other errors end Run;
// they name Kafka's error codes (kafkautil.Named).
func (r *Runner) Run(ctx context.Context) error { return kafkautil.Named(r.run(ctx)) }

func (r *Runner) run(ctx context.Context) error {
	r.cfg.Logger.Info("best-effort processor starting", "group", r.topo.Group, "inputs", r.topo.Inputs,
		"table", r.topo.TableTopic(), "stateDir", r.cfg.StateDir)
	if r.newLagOffsets != nil {
		stopLag := r.lag.start(r.newLagOffsets)
		defer stopLag()
	}
	backoff := r.firstBackoff
	for {
		start := time.Now()
		err := r.current().Run(ctx)
		r.lag.reset()
		switch {
		case err == nil || (ctx.Err() != nil && errors.Is(err, context.Canceled)):
			return nil
		case ctx.Err() != nil && leavingGroupFailed(err):
			// Asked to stop, and goka could not leave the group cleanly (the
			// group had moved on, or the coordinator is away). Nothing is
			// lost: offsets not committed are consumed again on the next
			// start and the table skips what was processed. A stop that
			// exits 1 for this would make a supervisor report a crash.
			r.cfg.Logger.Warn("best-effort processor stopped; leaving the consumer group failed", "err", err)
			return nil
		case ctx.Err() != nil && startInterrupted(err):
			// Asked to stop while goka was still starting: its wait for
			// the tables ends with an error of its own, not ctx's.
			// Nothing was processed yet.
			r.cfg.Logger.Info("best-effort processor stopped while starting", "err", err)
			return nil
		case ctx.Err() != nil || !(kafkautil.Transient(err) || r.failedOnDamage(err)):
			return fmt.Errorf("goka processor: %w", err)
		}
		if time.Since(start) >= restartReset {
			backoff = r.firstBackoff
		}
		proc, err := r.rebuild(ctx, err, &backoff)
		if err != nil || proc == nil {
			return err // nil: ctx ended
		}
		r.proc.Store(&proc)
	}
}

// leavingGroupFailed reports the errors goka returns when closing its
// consumer group fails at a stop: the member is no longer in the group's
// generation, or the coordinator cannot be reached.
func leavingGroupFailed(err error) bool {
	for _, k := range []error{sarama.ErrUnknownMemberId, sarama.ErrIllegalGeneration,
		sarama.ErrRebalanceInProgress, sarama.ErrFencedInstancedId} {
		if errors.Is(err, k) {
			return true
		}
	}
	return kafkautil.Transient(err)
}

// gokaStartInterrupted is goka's error (Processor.waitForStartupTables)
// when its context ends before the processor's tables are up. goka has no
// sentinel for it, so it is matched by its text. Seen in make chaos: a
// worker scaled down 0.1 s after it started exited 1 with it.
const gokaStartInterrupted = "context closed while waiting for startup tables to become ready"

func startInterrupted(err error) bool { return strings.Contains(err.Error(), gokaStartInterrupted) }

// rebuild waits and builds a new goka processor, retrying any error for up
// to kafkautil.StartupTimeout: the config was good when New built the first
// one, so what fails now is the cluster (goka's "cannot connect to broker"
// carries no error type to classify). It returns nil, nil when ctx ends.
func (r *Runner) rebuild(ctx context.Context, cause error, backoff *time.Duration) (gokaProcessor, error) {
	deadline := time.Now().Add(kafkautil.StartupTimeout)
	for {
		r.cfg.Logger.Warn("goka processor stopped; starting a new one", "err", cause, "in", *backoff)
		t := time.NewTimer(*backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil
		case <-t.C:
		}
		*backoff = min(2**backoff, maxRestartBackoff)
		proc, err := r.newProc()
		if err == nil {
			return proc, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("goka processor failed (%w); a new one still failed after %v: %w", cause, kafkautil.StartupTimeout, err)
		}
		cause = err
	}
}

// failedOnDamage reports whether the group table's store of a partition is
// damaged, after goka's processor failed with err. goka formats a storage
// error with %v, so err cannot tell; the stores can, once goka has closed
// them: each is opened and read (openCounted, a scan of every block). A
// store that fails to open for another reason (a file-system error, still
// locked) is not damaged. Damage found at open never gets here: the storage
// builder replaces the store then (countingBuilder).
func (r *Runner) failedOnDamage(err error) bool {
	entries, readErr := os.ReadDir(r.cfg.StateDir)
	if readErr != nil {
		return false
	}
	prefix := r.topo.TableTopic() + "." // goka's dir/<topic>.<partition>
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		path := filepath.Join(r.cfg.StateDir, e.Name())
		db, _, openErr := openCounted(path)
		if openErr == nil {
			db.Close()
			continue
		}
		if leveldbx.Corrupted(openErr) {
			r.cfg.Logger.Error("goka processor failed on a damaged table store; a new processor replaces it from the changelog",
				"path", path, "damage", openErr, "err", err)
			return true
		}
	}
	return false
}

// Get reads key from the local table (goka hashes it to its partition); it
// fails when another instance holds that partition.
func (r *Runner) Get(key string) (any, error) { return r.current().Get(key) }

// Ready reports whether every assigned partition's table is recovered. Unlike
// the exactly-once runtime's (processor.Health), it does not watch commits:
// goka commits offsets on its own, and a worker whose offsets do not advance
// stays ready and live.
func (r *Runner) Ready() bool { return r.current().Recovered() }

func (r *Runner) current() gokaProcessor { return *r.proc.Load() }

// slogPrinter adapts slog to goka's printf-style logger.
type slogPrinter struct{ l *slog.Logger }

func (p slogPrinter) Print(args ...any)   { p.l.Info(fmt.Sprint(args...), "component", "goka") }
func (p slogPrinter) Println(args ...any) { p.l.Info(fmt.Sprint(args...), "component", "goka") }
func (p slogPrinter) Printf(format string, args ...any) {
	p.l.Info(fmt.Sprintf(format, args...), "component", "goka")
}
