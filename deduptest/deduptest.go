// Package deduptest runs a dedup topology in memory, for unit tests of a
// handler: send records to the inputs, read what the handler wrote, what was
// dead-lettered and what the table holds, without a broker. Like Kafka
// Streams' TopologyTestDriver, it runs the same callback the runtimes run
// (on goka's in-memory tester), one record at a time and synchronously: when
// Send returns, the record and any loop record it made have been processed.
//
// What it does not show: transactions, crashes and rebalances (the
// integration tests on a real broker do), and the order of headers, which
// goka's tester keeps in a map.
package deduptest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/tester"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/codecs"
	"github.com/dedupkit/dedup/internal/engine"
)

// Driver pushes records through one topology.
type Driver struct {
	t      testing.TB
	tt     *tester.Tester
	topo   *dedup.Topology
	now    time.Time
	queues map[string]*tester.QueueTracker
}

// New starts topo in memory; the processor stops when the test ends. The
// driver runs a copy of topo whose clock is the driver's (see SetNow), so
// topo itself is not changed.
func New(t testing.TB, topo *dedup.Topology) *Driver {
	t.Helper()
	if err := topo.Validate(); err != nil {
		t.Fatalf("deduptest: %v", err)
	}
	d := &Driver{t: t, tt: tester.New(t), now: time.Now(), queues: map[string]*tester.QueueTracker{}}
	run := *topo
	run.Now = func() time.Time { return d.now }
	d.topo = &run
	proc, err := goka.NewProcessor(nil, engine.Graph(&run, 0, nil), goka.WithTester(d.tt), goka.WithNilHandling(goka.NilProcess))
	if err != nil {
		t.Fatalf("deduptest: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- proc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("deduptest: processor: %v", err)
		}
	})
	for _, topic := range append([]string{run.DLQ}, run.Outputs...) {
		d.queues[topic] = d.tt.NewQueueTracker(topic)
	}
	return d
}

// SetNow sets the clock the table judges by (time.Now at New). Records sent
// afterwards are stamped with it too.
func (d *Driver) SetNow(now time.Time) { d.now = now }

// Send writes one record to the first input topic and processes it. A nil
// value is a tombstone.
func (d *Driver) Send(key string, value []byte, headers ...dedup.Header) {
	d.t.Helper()
	d.SendTo(d.topo.Inputs[0], key, value, headers...)
}

// SendTo is Send to one of the topology's inputs, for a topology that
// reads several: the table is shared, so an event sent to one input and
// then to another is skipped the second time.
func (d *Driver) SendTo(input, key string, value []byte, headers ...dedup.Header) {
	d.t.Helper()
	if !slices.Contains(d.topo.Inputs, input) {
		d.t.Fatalf("deduptest: %q is not an input of the topology (%v)", input, d.topo.Inputs)
	}
	h := goka.Headers{}
	for _, x := range headers {
		h[x.Key] = x.Value
	}
	d.tt.Consume(input, key, value, tester.WithHeaders(h), tester.WithTime(d.now))
}

// Output returns the messages written to topic since the last call.
func (d *Driver) Output(topic string) []dedup.Message {
	d.t.Helper()
	q, ok := d.queues[topic]
	if !ok {
		d.t.Fatalf("deduptest: %q is not an output of the topology (%v)", topic, d.topo.Outputs)
	}
	var out []dedup.Message
	for {
		h, key, value, ok := q.NextRawWithHeaders()
		if !ok {
			return out
		}
		out = append(out, dedup.Message{Topic: topic, Key: key, Value: value, Headers: headers(h)})
	}
}

// DeadLetter is one record of the dead-letter topic.
type DeadLetter struct {
	dedup.Message
	Reason string // the dlq-reason header, e.g. handler-error
	Error  string // the dlq-error header
}

// DeadLetters returns the dead letters written since the last call.
func (d *Driver) DeadLetters() []DeadLetter {
	d.t.Helper()
	var out []DeadLetter
	for _, m := range d.Output(d.topo.DLQ) {
		r, _ := m.Headers.Get(dedup.HeaderDLQReason)
		e, _ := m.Headers.Get(dedup.HeaderDLQError)
		out = append(out, DeadLetter{Message: m, Reason: string(r), Error: string(e)})
	}
	return out
}

// Seen returns the table's record of a dedup key (the event ID, or the
// aggregate ID with KeyAggregateID; for CloudEvents, source and ID joined
// by a NUL byte), nil when the key is not marked.
func (d *Driver) Seen(key string) *codecs.SeenRecord {
	v := d.tt.TableValue(goka.GroupTable(goka.Group(d.topo.Group)), key)
	if v == nil {
		return nil
	}
	return v.(*codecs.SeenRecord)
}

func headers(m goka.Headers) dedup.Headers {
	var h dedup.Headers
	for k, v := range m {
		h = append(h, dedup.Header{Key: k, Value: v})
	}
	return h
}
