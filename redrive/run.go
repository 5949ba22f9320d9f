package redrive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/faults"
	"github.com/dedupkit/dedup/internal/kafkautil"
)

var (
	// ErrNoDLQ is returned when the dead-letter topic does not exist.
	ErrNoDLQ = errors.New("dead-letter topic does not exist")
	// ErrFenced is returned when another run with the same state topic
	// started meanwhile: it took over, and this run's open transaction was
	// aborted. What this run committed before stays moved.
	ErrFenced = errors.New("another re-drive with the same state topic took over")
)

// errLimit stops the scan at Config.Limit.
var errLimit = errors.New("limit reached")

// Run moves the dead letters cfg selects and reports what it did. It reads
// the dead-letter topic read_committed up to the last stable offset of each
// partition at the start, so dead letters written meanwhile (a re-driven
// copy that failed again) wait for the next run.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	report, err := runAll(ctx, cfg)
	return report, kafkautil.Named(err) // PRODUCER_FENCED, not sarama's "Unknown error ... 90"
}

func runAll(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	sc := sarama.NewConfig()
	sc.Version = kafkautil.SaramaVersion
	sc.ClientID = "dedup-redrive"
	sc.Metadata.AllowAutoTopicCreation = false // a mistyped target must not appear
	if err := cfg.Security.Apply(sc); err != nil {
		return nil, err
	}
	client, err := sarama.NewClient(cfg.Brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("connect to %v: %w", cfg.Brokers, err)
	}
	defer client.Close()
	r := &run{cfg: cfg, client: client, report: newReport(cfg), log: kafkautil.NamingLogger(cfg.Logger),
		partitions: map[string]int32{}, marks: map[string]mark{}, beforeCommit: faults.BeforeCommit(ctx)}
	parts, err := r.dlqPartitions()
	if err != nil {
		return nil, err
	}
	if !cfg.DryRun {
		if err := r.open(ctx, sc); err != nil {
			return nil, err
		}
		defer r.producer.Close()
	}
	if err := r.readMarks(ctx); err != nil {
		return nil, err
	}
	for _, p := range parts {
		err := r.scan(ctx, p)
		if errors.Is(err, errLimit) {
			r.report.LimitReached = true
			break
		}
		if err != nil {
			return r.report, err
		}
	}
	if err := r.flush(); err != nil {
		return r.report, err
	}
	r.log.Info("re-drive done", "dlq", cfg.DLQ, "dry_run", cfg.DryRun, "scanned", r.report.Scanned,
		"redriven", r.report.Redriven, "already", r.report.AlreadyRedriven, "not_redrivable", r.report.NotRedrivableTotal())
	return r.report, nil
}

// run is one Run's state; one goroutine owns it.
type run struct {
	cfg        Config
	client     sarama.Client
	producer   sarama.SyncProducer // nil in a dry run
	report     *Report
	log        *slog.Logger
	partitions map[string]int32 // topic -> partition count, 0: the topic does not exist
	marks      map[string]mark  // the state: markKey -> mark
	stale      []string         // state keys to delete (their dead letters are gone)
	batch      []pending        // moves of the open transaction

	beforeCommit func() error // a test's fault point (internal/faults)
}

type pending struct {
	d   deadLetter
	msg *sarama.ProducerMessage
}

// dlqPartitions are the dead-letter topic's partitions the filter selects.
func (r *run) dlqPartitions() ([]int32, error) {
	all, err := r.client.Partitions(r.cfg.DLQ)
	if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		return nil, fmt.Errorf("%w: %q (the worker creates it at start; --dlq names another)", ErrNoDLQ, r.cfg.DLQ)
	}
	if err != nil {
		return nil, fmt.Errorf("partitions of %s: %w", r.cfg.DLQ, err)
	}
	if len(r.cfg.Partitions) == 0 {
		return all, nil
	}
	var parts []int32
	for _, p := range r.cfg.Partitions {
		if !slices.Contains(all, p) {
			return nil, fmt.Errorf("--partition: %s has no partition %d (it has %d)", r.cfg.DLQ, p, len(all))
		}
		parts = append(parts, p)
	}
	slices.Sort(parts)
	return slices.Compact(parts), nil
}

// open creates the state topic when missing and the transactional
// producer, whose InitProducerID fences an earlier run with the same
// state topic. Only then is the state read, so that run's last
// transaction is decided (aborted, or committed and visible) before.
func (r *run) open(ctx context.Context, base *sarama.Config) error {
	admin, err := sarama.NewClusterAdminFromClient(r.client)
	if err != nil {
		return err
	}
	// Closing admin would close the shared client; Run closes it.
	err = kafkautil.CreateTopic(admin, r.cfg.StateTopic, 1, r.cfg.Replication, map[string]string{"cleanup.policy": "compact"})
	if err != nil {
		return fmt.Errorf("state topic: %w", err)
	}
	pc := *base
	pc.ClientID = "dedup-redrive-" + r.cfg.StateTopic
	pc.Producer.Idempotent = true
	pc.Producer.RequiredAcks = sarama.WaitForAll
	pc.Producer.Return.Successes = true
	pc.Producer.Return.Errors = true
	pc.Producer.Partitioner = sarama.NewManualPartitioner
	pc.Producer.Transaction.ID = r.cfg.StateTopic
	pc.Producer.Transaction.Timeout = r.cfg.TransactionTimeout
	// InitProducerID answers CONCURRENT_TRANSACTIONS while the broker
	// finishes an earlier run's transaction.
	pc.Producer.Transaction.Retry.Max = 100
	pc.Producer.Transaction.Retry.Backoff = 200 * time.Millisecond
	pc.Net.MaxOpenRequests = 1
	if limit, _, err := kafkautil.MaxMessageBytes(admin, r.cfg.DLQ); err == nil && limit > pc.Producer.MaxMessageBytes {
		// A dead letter fits its topic; its copy is smaller but for one header.
		pc.Producer.MaxMessageBytes = limit + 1024
	}
	r.producer, err = sarama.NewSyncProducer(r.cfg.Brokers, &pc)
	if err != nil {
		return fmt.Errorf("transactional producer %s: %w", r.cfg.StateTopic, fenced(err))
	}
	return ctx.Err()
}

// readMarks reads the state topic read_committed to its end. A dry run
// reads what there is; with no state topic yet, nothing was re-driven.
func (r *run) readMarks(ctx context.Context) error {
	parts, err := r.partitionsOf(r.cfg.StateTopic, !r.cfg.DryRun)
	if err != nil {
		return err
	}
	for p := range parts {
		start, lso, err := kafkautil.Bounds(r.client, r.cfg.StateTopic, p)
		if err != nil {
			return fmt.Errorf("state topic: %w", err)
		}
		_, err = kafkautil.ReadCommitted(ctx, r.client, r.cfg.StateTopic, p, start, lso, func(_ int64, rec *sarama.Record) error {
			k := string(rec.Key)
			if rec.Value == nil {
				delete(r.marks, k)
				return nil
			}
			var m mark
			if err := json.Unmarshal(rec.Value, &m); err != nil {
				r.log.Warn("state record that does not parse, ignored", "topic", r.cfg.StateTopic, "key", k, "err", err)
				return nil
			}
			r.marks[k] = m
			return nil
		})
		if err != nil {
			return fmt.Errorf("read state topic %s: %w", r.cfg.StateTopic, err)
		}
	}
	if r.cfg.DryRun {
		return nil
	}
	return r.findStale()
}

// findStale lists the state records of this dead-letter topic whose dead
// letters retention deleted, to be removed in the first transaction.
func (r *run) findStale() error {
	starts := map[int32]int64{}
	for k := range r.marks {
		pos, ok := parseMarkKey(k)
		if !ok || pos.Topic != r.cfg.DLQ {
			continue
		}
		start, ok := starts[pos.Partition]
		if !ok {
			var err error
			if start, _, err = kafkautil.Bounds(r.client, r.cfg.DLQ, pos.Partition); err != nil {
				if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
					continue // a partition the topic no longer has
				}
				return err
			}
			starts[pos.Partition] = start
		}
		if pos.Offset < start {
			r.stale = append(r.stale, k)
		}
	}
	slices.Sort(r.stale)
	return nil
}

// partitionsOf is a topic's partition count, 0 when it does not exist.
// wait allows for a topic created a moment ago whose metadata has not
// reached the broker asked.
func (r *run) partitionsOf(topic string, wait bool) (int32, error) {
	if n, ok := r.partitions[topic]; ok {
		return n, nil
	}
	deadline := time.Now().Add(kafkautil.InputTopicGrace)
	for {
		parts, err := r.client.Partitions(topic)
		if errors.Is(err, sarama.ErrUnknownTopicOrPartition) && wait && time.Now().Before(deadline) {
			time.Sleep(250 * time.Millisecond)
			_ = r.client.RefreshMetadata(topic)
			continue
		}
		switch {
		case errors.Is(err, sarama.ErrUnknownTopicOrPartition):
			r.partitions[topic] = 0
		case err != nil:
			return 0, fmt.Errorf("partitions of %s: %w", topic, err)
		default:
			r.partitions[topic] = int32(len(parts))
		}
		return r.partitions[topic], nil
	}
}

// scan reads one partition of the dead-letter topic within the offset
// filter and moves what passes.
func (r *run) scan(ctx context.Context, p int32) error {
	start, lso, err := kafkautil.Bounds(r.client, r.cfg.DLQ, p)
	if err != nil {
		return err
	}
	from, to := max(start, r.cfg.FromOffset), lso
	if r.cfg.ToOffset > 0 {
		to = min(to, r.cfg.ToOffset)
	}
	if from >= to {
		return nil
	}
	_, err = kafkautil.ReadCommittedTimed(ctx, r.client, r.cfg.DLQ, p, from, to, func(off int64, ts time.Time, rec *sarama.Record) error {
		return r.visit(parseDeadLetter(r.cfg.DLQ, p, off, ts, rec))
	})
	return err
}

// visit judges one dead letter: filtered, already moved, not movable, or
// added to the open transaction.
func (r *run) visit(d deadLetter) error {
	rep := r.report
	if r.cfg.Limit > 0 && rep.Redriven+len(r.batch) >= r.cfg.Limit {
		return errLimit
	}
	rep.Scanned++
	if f := r.cfg.filter(&d); f != "" {
		rep.Skipped[f]++
		return nil
	}
	rep.Matched++
	if m, ok := r.marks[markKey(d.pos)]; ok && m.of(&d) {
		rep.AlreadyRedriven++
		return nil
	}
	topic, why := r.cfg.target(&d)
	if why != "" {
		rep.refuse(&d, why)
		return nil
	}
	n, err := r.partitionsOf(topic, false)
	if err != nil {
		return err
	}
	if n == 0 {
		rep.refuse(&d, WhyNoTopic)
		return nil
	}
	part, err := partitionFor(&d, topic, n)
	if err != nil {
		return err
	}
	r.batch = append(r.batch, pending{d: d, msg: copyMessage(&d, topic, part)})
	if len(r.batch) >= r.cfg.BatchSize {
		return r.flush()
	}
	return nil
}

// flush moves the open batch: the copies and their state records (and the
// stale state records' tombstones) in one transaction. A dry run only
// counts.
func (r *run) flush() error {
	if len(r.batch) == 0 && len(r.stale) == 0 {
		return nil
	}
	batch, stale := r.batch, r.stale
	r.batch, r.stale = nil, nil
	if r.cfg.DryRun {
		for _, b := range batch {
			r.report.moved(Move{From: b.d.pos, To: dedup.Position{Topic: b.msg.Topic, Partition: b.msg.Partition, Offset: -1}, Reason: b.d.reason}, b.d.again)
		}
		return nil
	}
	if err := r.commit(batch, stale); err != nil {
		return err
	}
	for _, b := range batch {
		r.report.moved(Move{From: b.d.pos, To: dedup.Position{Topic: b.msg.Topic, Partition: b.msg.Partition, Offset: b.msg.Offset}, Reason: b.d.reason}, b.d.again)
	}
	r.report.Pruned += len(stale)
	return nil
}

func (r *run) commit(batch []pending, stale []string) error {
	p := r.producer
	if err := p.BeginTxn(); err != nil {
		return fmt.Errorf("begin transaction: %w", fenced(err))
	}
	abort := func(step string, err error) error {
		err = fmt.Errorf("%s: %w", step, fenced(err))
		if p.TxnStatus()&sarama.ProducerTxnFlagInTransaction != 0 {
			if aerr := p.AbortTxn(); aerr != nil {
				r.log.Warn("abort transaction", "err", aerr)
			}
		}
		return err
	}
	copies := make([]*sarama.ProducerMessage, len(batch))
	for i, b := range batch {
		copies[i] = b.msg
	}
	if len(copies) > 0 {
		if err := p.SendMessages(copies); err != nil {
			return abort("write re-driven records", err)
		}
	}
	stateParts, err := r.partitionsOf(r.cfg.StateTopic, true)
	if err == nil && stateParts == 0 {
		err = fmt.Errorf("%s does not exist", r.cfg.StateTopic)
	}
	if err != nil {
		return abort("state topic", err)
	}
	now := time.Now().UTC().Format(time.RFC3339)
	var marks []*sarama.ProducerMessage
	add := func(key string, value []byte) error {
		part, err := sarama.NewHashPartitioner(r.cfg.StateTopic).Partition(
			&sarama.ProducerMessage{Key: sarama.StringEncoder(key)}, stateParts)
		m := &sarama.ProducerMessage{Topic: r.cfg.StateTopic, Partition: part, Key: sarama.StringEncoder(key)}
		if value != nil {
			m.Value = sarama.ByteEncoder(value)
		}
		marks = append(marks, m)
		return err
	}
	for _, k := range stale {
		if err := add(k, nil); err != nil {
			return abort("state record", err)
		}
	}
	for _, b := range batch {
		m := mark{Source: sourceOf(&b.d), Time: b.d.pos.Timestamp.UnixMilli(), Reason: b.d.reason, At: now,
			Copy: fmt.Sprintf("%s/%d/%d", b.msg.Topic, b.msg.Partition, b.msg.Offset)}
		if err := add(markKey(b.d.pos), m.encode()); err != nil {
			return abort("state record", err)
		}
	}
	if err := p.SendMessages(marks); err != nil {
		return abort("write state records", err)
	}
	if r.beforeCommit != nil {
		if err := r.beforeCommit(); err != nil {
			return fmt.Errorf("before commit: %w", err) // no abort: the next run's InitProducerID does it
		}
	}
	if err := p.CommitTxn(); err != nil {
		return abort("commit", err)
	}
	return nil
}

// fenced wraps err with ErrFenced when another producer with the same
// transactional ID took over.
func fenced(err error) error {
	var pes sarama.ProducerErrors
	first := err
	if errors.As(err, &pes) && len(pes) > 0 {
		first = pes[0]
	}
	if errors.Is(first, sarama.ErrProducerFenced) || errors.Is(first, sarama.ErrInvalidProducerEpoch) {
		return fmt.Errorf("%w: %w", ErrFenced, first)
	}
	return err
}
