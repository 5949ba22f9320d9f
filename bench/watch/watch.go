// Package watch reads a contender's output topic read_committed, as a
// downstream consumer would, and records when each output became visible and
// which input record it came from (the loadgen "bench-rec" header every
// contender forwards). Reading the input topic too gives each input record's
// append time (the topic uses LogAppendTime), so end-to-end latency is
// output-visible minus input-appended, both on this machine's clock.
package watch

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/bench/loadgen"
	"github.com/dedupkit/dedup/internal/kafkautil"
)

// Config says what to watch.
type Config struct {
	Brokers []string
	Output  string
	// Input, when set, is read too, for the append times (latency runs).
	Input string
	Plan  *loadgen.Plan
	// ByRecord counts outputs per input record (the raw pipe forwards every
	// record); otherwise per distinct event (the dedup contenders).
	ByRecord bool
}

// Validate reports a config that cannot run.
func (c *Config) Validate() error {
	if len(c.Brokers) == 0 || c.Output == "" || c.Plan == nil {
		return errors.New("watch: brokers, output and plan are required")
	}
	return nil
}

// Watcher consumes until Stop.
type Watcher struct {
	cfg      Config
	consumer sarama.Consumer
	stop     chan struct{}
	wg       sync.WaitGroup

	mu       sync.Mutex
	count    []uint16 // outputs per identity (record or event)
	visible  []int64  // unix nanos the identity's first output was read
	fromRec  []int32  // the input record its first output carries
	appended []int64  // per input record: its log append time, unix nanos
	outputs  int
	distinct int
	foreign  int // outputs without a valid bench-rec header
	first    time.Time
	lastNew  time.Time
	lastAny  time.Time
}

// Start begins consuming every partition of the output (and input) from the
// oldest offset.
func Start(cfg Config) (*Watcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sc := sarama.NewConfig()
	sc.Version = kafkautil.SaramaVersion
	sc.ClientID = "bench-watch"
	sc.Consumer.IsolationLevel = sarama.ReadCommitted
	sc.Consumer.MaxWaitTime = 100 * time.Millisecond
	sc.Consumer.Return.Errors = false
	consumer, err := sarama.NewConsumer(cfg.Brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	n := cfg.Plan.Len()
	ids := n
	if !cfg.ByRecord {
		ids = cfg.Plan.Distinct()
	}
	w := &Watcher{cfg: cfg, consumer: consumer, stop: make(chan struct{}),
		count: make([]uint16, ids), visible: make([]int64, ids), fromRec: make([]int32, ids)}
	if cfg.Input != "" {
		w.appended = make([]int64, n)
		if err := w.consume(cfg.Input, w.onInput); err != nil {
			w.Stop()
			return nil, err
		}
	}
	if err := w.consume(cfg.Output, w.onOutput); err != nil {
		w.Stop()
		return nil, err
	}
	return w, nil
}

func (w *Watcher) consume(topic string, fn func(*sarama.ConsumerMessage, time.Time)) error {
	parts, err := w.consumer.Partitions(topic)
	if err != nil {
		return fmt.Errorf("watch: partitions of %s: %w", topic, err)
	}
	for _, p := range parts {
		pc, err := w.consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			return fmt.Errorf("watch: consume %s/%d: %w", topic, p, err)
		}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			defer pc.Close()
			for {
				select {
				case <-w.stop:
					return
				case m := <-pc.Messages():
					fn(m, time.Now())
				}
			}
		}()
	}
	return nil
}

func recordOf(m *sarama.ConsumerMessage) int {
	for _, h := range m.Headers {
		if string(h.Key) == loadgen.HeaderRecord {
			return loadgen.ParseRecordHeader(h.Value)
		}
	}
	return -1
}

func (w *Watcher) onInput(m *sarama.ConsumerMessage, _ time.Time) {
	rec := recordOf(m)
	if rec < 0 || rec >= len(w.appended) {
		return
	}
	w.mu.Lock()
	w.appended[rec] = m.Timestamp.UnixNano()
	w.mu.Unlock()
}

func (w *Watcher) onOutput(m *sarama.ConsumerMessage, now time.Time) {
	rec := recordOf(m)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.outputs++
	w.lastAny = now
	if w.first.IsZero() {
		w.first = now
	}
	if rec < 0 || rec >= w.cfg.Plan.Len() {
		w.foreign++
		return
	}
	id := rec
	if !w.cfg.ByRecord {
		id = int(w.cfg.Plan.Records[rec].Seq)
	}
	if w.count[id] == 0 {
		w.distinct++
		w.visible[id] = now.UnixNano()
		w.fromRec[id] = int32(rec)
		w.lastNew = now
	}
	if w.count[id] < 65535 {
		w.count[id]++
	}
}

// Progress is a snapshot of what the watcher has seen.
type Progress struct {
	Outputs  int // records read from the output
	Distinct int // identities with at least one output
	Expected int // identities the plan has
	First    time.Time
	LastNew  time.Time // when the latest new identity appeared
	LastAny  time.Time
}

// Progress reports the counts so far.
func (w *Watcher) Progress() Progress {
	w.mu.Lock()
	defer w.mu.Unlock()
	return Progress{Outputs: w.outputs, Distinct: w.distinct, Expected: len(w.count),
		First: w.first, LastNew: w.lastNew, LastAny: w.lastAny}
}

// Stop ends consuming; the watcher's results stay readable.
func (w *Watcher) Stop() {
	select {
	case <-w.stop:
		return
	default:
	}
	close(w.stop)
	w.wg.Wait()
	w.consumer.Close()
}

// Correctness counts the outputs against the plan.
type Correctness struct {
	Expected   int // identities (records or distinct events)
	Outputs    int // output records read
	Duplicates int // outputs beyond the first per identity
	Missing    int // identities with no output
	Foreign    int // outputs that carried no bench-rec header
	// Unexpected (CorrectnessUpTo): outputs of events none of whose
	// records was written.
	Unexpected int
	// InputDuplicatesPassed: for a contender counted by record (the raw
	// pipe), outputs that repeat an already output event.
	InputDuplicatesPassed int
}

// Correctness reports the counts; call after Stop.
func (w *Watcher) Correctness() Correctness {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := Correctness{Expected: len(w.count), Outputs: w.outputs, Foreign: w.foreign}
	for _, n := range w.count {
		if n == 0 {
			c.Missing++
		} else {
			c.Duplicates += int(n) - 1
		}
	}
	if w.cfg.ByRecord {
		seen := make([]bool, w.cfg.Plan.Distinct())
		for rec, n := range w.count {
			if n == 0 {
				continue
			}
			seq := w.cfg.Plan.Records[rec].Seq
			if seen[seq] {
				c.InputDuplicatesPassed++
			}
			seen[seq] = true
		}
	}
	return c
}

// Latencies returns, sorted, append-to-visible latency of every identity's
// first output whose input append time is known. Needs Config.Input.
func (w *Watcher) Latencies() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.appended == nil {
		return nil
	}
	out := make([]time.Duration, 0, w.distinct)
	for id, n := range w.count {
		if n == 0 {
			continue
		}
		at := w.appended[w.fromRec[id]]
		if at == 0 {
			continue
		}
		out = append(out, time.Duration(w.visible[id]-at))
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// CorrectnessUpTo counts the outputs against the plan's first records
// records only, for a load stopped part-way through its plan
// (loadgen.ProduceUntil): an event is expected once its first record is among
// them, and an output of any other event is unexpected. Per distinct event
// only (not ByRecord).
func (w *Watcher) CorrectnessUpTo(records int) Correctness {
	w.mu.Lock()
	defer w.mu.Unlock()
	first := make([]bool, len(w.count)) // the event's first record is written
	for _, r := range w.cfg.Plan.Records[:min(records, len(w.cfg.Plan.Records))] {
		first[r.Seq] = true
	}
	c := Correctness{Outputs: w.outputs, Foreign: w.foreign}
	for id, n := range w.count {
		switch {
		case !first[id]:
			c.Unexpected += int(n)
		case n == 0:
			c.Expected++
			c.Missing++
		default:
			c.Expected++
			c.Duplicates += int(n) - 1
		}
	}
	return c
}

// CorrectnessOf counts the outputs against the identities of the given input
// records only, for a run stopped part-way through its input: records is what
// the contender committed (its group's offsets) before it stopped, each of
// whose identities must have an output. Duplicates, Outputs and Foreign count
// over every output, so an identity done beyond the committed offsets (the
// worker commits its seen mark with it) may be output once, never twice.
func (w *Watcher) CorrectnessOf(records []int) Correctness {
	w.mu.Lock()
	defer w.mu.Unlock()
	want := make([]bool, len(w.count))
	for _, rec := range records {
		if rec < 0 || rec >= len(w.cfg.Plan.Records) {
			continue
		}
		id := rec
		if !w.cfg.ByRecord {
			id = int(w.cfg.Plan.Records[rec].Seq)
		}
		want[id] = true
	}
	c := Correctness{Outputs: w.outputs, Foreign: w.foreign}
	for id, n := range w.count {
		if n > 1 {
			c.Duplicates += int(n) - 1
		}
		if want[id] {
			c.Expected++
			if n == 0 {
				c.Missing++
			}
		}
	}
	return c
}
