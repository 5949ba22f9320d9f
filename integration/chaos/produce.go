package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/kafkautil"
)

// headerBad marks a malformed record with "<kind>/<n>". The worker copies
// the original headers to the dead-letter record, so every injected record
// can be found there again.
const headerBad = "chaos-bad"

// badKind is a kind of malformed record and the dlq-reason it must get.
type badKind struct {
	reason string
	make   func(n int) (key, value []byte)
}

// badKinds are the scenario's eight kinds of malformed record.
var badKinds = map[string]badKind{
	"not-json": {"not-json", func(n int) ([]byte, []byte) {
		return fmt.Appendf(nil, "agg-bad-%d", n), fmt.Appendf(nil, "this is not JSON #%d", n)
	}},
	"no-id": {"no-id", func(n int) ([]byte, []byte) {
		return fmt.Appendf(nil, "agg-bad-%d", n), fmt.Appendf(nil, `{"aggregateId":"agg-bad-%d","type":"OrderPaid","payload":{"n":%d}}`, n, n)
	}},
	"oversized-id": {"id-too-long", func(n int) ([]byte, []byte) {
		return fmt.Appendf(nil, "agg-bad-%d", n), fmt.Appendf(nil, `{"eventId":"long-%d-%s","type":"OrderPaid"}`, n, strings.Repeat("x", 300))
	}},
	"wrong-types": {"bad-field", func(n int) ([]byte, []byte) {
		variants := []string{
			`{"eventId":%d}`,
			`{"eventId":"wt-%d","aggregateId":42}`,
			`{"eventId":"wt-%d","occurredAt":"yesterday"}`,
			`{"eventId":"wt-%d","type":["OrderPaid"]}`,
		}
		return fmt.Appendf(nil, "agg-bad-%d", n), fmt.Appendf(nil, variants[n%len(variants)], n)
	}},
	// Invalid UTF-8 in the record key and in the event ID.
	"invalid-utf8": {"bad-field", func(n int) ([]byte, []byte) {
		return fmt.Appendf(nil, "agg-\xc3\x28-%d", n), fmt.Appendf(nil, "{\"eventId\":\"u8-%d-\xff\xfe\",\"type\":\"OrderPaid\"}", n)
	}},
	// The event ID twice with different values: a decoder that took either
	// one would output an event nobody can name.
	"duplicate-id": {"duplicate-field", func(n int) ([]byte, []byte) {
		return fmt.Appendf(nil, "agg-bad-%d", n), fmt.Appendf(nil, `{"eventId":"dupid-%d-a","type":"OrderPaid","eventId":"dupid-%d-b"}`, n, n)
	}},
	"empty-value": {"empty-value", func(n int) ([]byte, []byte) {
		return fmt.Appendf(nil, "agg-bad-%d", n), []byte{}
	}},
	"null-value": {"null-value", func(n int) ([]byte, []byte) {
		return fmt.Appendf(nil, "agg-bad-%d", n), nil
	}},
}

func allBadKinds() []string {
	return []string{"not-json", "no-id", "oversized-id", "wrong-types", "invalid-utf8", "duplicate-id", "empty-value", "null-value"}
}

// record is one record of the load.
type record struct {
	key, value []byte // value nil: a null (tombstone) record
	event      int    // distinct event number, -1 for a malformed record
	bad        string // "<kind>/<n>" for a malformed record
}

// workload generates the records of a run in order, deterministically from
// its seed: every distinct event once, DupRate of them a second time (right
// after, or LateShare of them re-published further down the stream with a
// new offset) and Bad malformed records spread evenly.
type workload struct {
	cfg     *Config
	rng     *rand.Rand
	next    int // next distinct event
	bad     int // malformed records generated
	late    []lateRecord
	lateGap int // events between an event and its re-publication
	queue   []record
	dups    int
	now     func() time.Time // occurredAt of the events
}

type lateRecord struct {
	due int
	rec record
}

func newWorkload(cfg *Config, seed uint64) *workload {
	return &workload{cfg: cfg, rng: rand.New(rand.NewPCG(seed, 1)), lateGap: max(50, cfg.Events/20), now: time.Now}
}

func (w *workload) done() bool {
	return w.next >= w.cfg.Events && len(w.queue) == 0 && len(w.late) == 0
}

// take returns up to n next records.
func (w *workload) take(n int) []record {
	for len(w.queue) < n && (w.next < w.cfg.Events || len(w.late) > 0) {
		w.step()
	}
	n = min(n, len(w.queue))
	out := slices.Clone(w.queue[:n])
	w.queue = w.queue[n:]
	return out
}

// step generates the records of the next distinct event: the event, its
// immediate duplicate, the malformed records due and the re-publications due.
func (w *workload) step() {
	if w.next >= w.cfg.Events { // the tail of re-publications
		w.queue = append(w.queue, w.late[0].rec)
		w.late = w.late[1:]
		return
	}
	i := w.next
	w.next++
	ev := w.event(i)
	w.queue = append(w.queue, ev)
	if w.rng.Float64() < w.cfg.DupRate {
		w.dups++
		if w.rng.Float64() < w.cfg.LateShare {
			w.late = append(w.late, lateRecord{due: i + w.lateGap, rec: ev})
		} else {
			w.queue = append(w.queue, ev)
		}
	}
	for ; w.bad < int(int64(w.cfg.Bad)*int64(i+1)/int64(w.cfg.Events)); w.bad++ {
		kind := w.cfg.BadKinds[w.bad%len(w.cfg.BadKinds)]
		key, value := badKinds[kind].make(w.bad)
		w.queue = append(w.queue, record{key: key, value: value, event: -1, bad: fmt.Sprintf("%s/%d", kind, w.bad)})
	}
	for len(w.late) > 0 && w.late[0].due <= i {
		w.queue = append(w.queue, w.late[0].rec)
		w.late = w.late[1:]
	}
}

func (w *workload) event(i int) record {
	agg := w.rng.IntN(w.cfg.Aggregates)
	value := fmt.Appendf(nil, `{"eventId":"e-%d","aggregateId":"agg-%d","type":"OrderPaid","occurredAt":%q,"payload":{"seq":%d,"amount":%d.%02d}}`,
		i, agg, w.now().UTC().Format(time.RFC3339), i, w.rng.IntN(500), w.rng.IntN(100))
	return record{key: fmt.Appendf(nil, "agg-%d", agg), value: value, event: i}
}

// eventNumber parses "e-<n>", the ID of distinct event n.
func eventNumber(id string) (int, bool) {
	s, ok := strings.CutPrefix(id, "e-")
	if !ok || s == "" {
		return 0, false
	}
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// produced is what the producer got acknowledged (acks=all).
type produced struct {
	mu      sync.Mutex
	acked   []bool         // by distinct event
	bad     map[string]int // acked malformed records by kind
	records int            // acked records
	retries int            // records sent again after an error
	errors  []string       // the first errors seen
}

// progress is read by the status line while the producer runs.
type progress struct{ sent atomic.Int64 }

// produce writes the workload to topic, paced at cfg.Rate records per
// second, until it is all acknowledged or ctx is done. Failed sends (a
// broker is down, a leader moves) are retried until they succeed.
func produce(ctx context.Context, cfg *Config, brokers []string, topic string, seed uint64, prog *progress) (*produced, error) {
	res := &produced{acked: make([]bool, cfg.Events), bad: map[string]int{}}
	w := newWorkload(cfg, seed)
	var p sarama.SyncProducer
	defer func() {
		if p != nil {
			p.Close()
		}
	}()
	const tick = 100 * time.Millisecond
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	start, sent := time.Now(), 0
	for !w.done() {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-ticker.C: // pacing the load
		}
		due := int(time.Since(start).Seconds()*float64(cfg.Rate)) - sent
		batch := w.take(min(due, cfg.Rate)) // catch up after a stall by at most a second's worth per tick
		if len(batch) == 0 {
			continue
		}
		if err := sendAll(ctx, &p, brokers, topic, batch, res); err != nil {
			return res, err
		}
		sent += len(batch)
		prog.sent.Store(int64(sent))
	}
	return res, nil
}

// sendAll sends batch, re-sending what failed (a new producer after repeated
// failures), and records the acknowledged records.
func sendAll(ctx context.Context, p *sarama.SyncProducer, brokers []string, topic string, batch []record, res *produced) error {
	msgs := make([]*sarama.ProducerMessage, len(batch))
	for i, r := range batch {
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Key: sarama.ByteEncoder(r.key), Metadata: i}
		if r.value != nil {
			msgs[i].Value = sarama.ByteEncoder(r.value)
		}
		if r.bad != "" {
			msgs[i].Headers = []sarama.RecordHeader{{Key: []byte(headerBad), Value: []byte(r.bad)}}
		}
	}
	failing := time.Time{}
	for attempt := 0; len(msgs) > 0; attempt++ {
		if *p == nil {
			np, err := sarama.NewSyncProducer(brokers, producerConfig())
			if err != nil {
				if err := res.failed(ctx, &failing, err, 0); err != nil {
					return err
				}
				continue
			}
			*p = np
		}
		err := (*p).SendMessages(msgs)
		var perrs sarama.ProducerErrors
		failed := map[int]bool{}
		if errors.As(err, &perrs) {
			for _, pe := range perrs {
				failed[pe.Msg.Metadata.(int)] = true
			}
		} else if err != nil { // not per message: assume none was acknowledged
			for _, m := range msgs {
				failed[m.Metadata.(int)] = true
			}
		}
		var again []*sarama.ProducerMessage
		for _, m := range msgs {
			i := m.Metadata.(int)
			if failed[i] {
				again = append(again, m)
				continue
			}
			res.ack(batch[i])
		}
		msgs = again
		if err != nil {
			if attempt >= 2 { // a producer stuck in a bad state: start afresh
				(*p).Close()
				*p = nil
			}
			if err := res.failed(ctx, &failing, err, len(again)); err != nil {
				return err
			}
		}
	}
	return nil
}

// failed notes a send error and waits a moment before the retry; it gives
// up when sends have failed for five minutes.
func (res *produced) failed(ctx context.Context, since *time.Time, err error, retried int) error {
	res.mu.Lock()
	res.retries += retried
	if len(res.errors) < 10 {
		res.errors = append(res.errors, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05"), err))
	}
	res.mu.Unlock()
	if since.IsZero() {
		*since = time.Now()
	}
	if time.Since(*since) > 5*time.Minute {
		return fmt.Errorf("producing failed for 5 minutes: %w", err)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Second): // retry back-off
		return nil
	}
}

func (res *produced) ack(r record) {
	res.mu.Lock()
	defer res.mu.Unlock()
	res.records++
	if r.event >= 0 {
		res.acked[r.event] = true
	} else {
		kind, _, _ := strings.Cut(r.bad, "/")
		res.bad[kind]++
	}
}

// producerConfig: idempotent, acks=all, and retries that outlast a leader
// election after a broker was killed.
func producerConfig() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = kafkautil.SaramaVersion
	c.ClientID = "dedup-chaos-load"
	c.Producer.Idempotent = true
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Return.Successes = true
	c.Producer.Return.Errors = true
	c.Producer.Retry.Max = 40
	c.Producer.Retry.Backoff = 500 * time.Millisecond
	c.Producer.Partitioner = sarama.NewHashPartitioner
	c.Net.MaxOpenRequests = 1
	c.Metadata.Retry.Max = 40
	c.Metadata.Retry.Backoff = 500 * time.Millisecond
	return c
}
