package engine

import (
	"github.com/dedupkit/dedup"

	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/tester"

	"github.com/dedupkit/dedup/codecs"
	"github.com/dedupkit/dedup/internal/wire"
)

// countingObserver records outcomes so tests can assert on them.
type countingObserver struct {
	mu                                                        sync.Mutex
	processed, skipped, expired, tooOld, handlerErrs, rekeyed int
	dlq                                                       map[string]int
}

func (o *countingObserver) OnProcessed(int32, time.Duration) {
	o.mu.Lock()
	o.processed++
	o.mu.Unlock()
}
func (o *countingObserver) OnSkipped(int32) { o.mu.Lock(); o.skipped++; o.mu.Unlock() }
func (o *countingObserver) OnExpired(int32) { o.mu.Lock(); o.expired++; o.mu.Unlock() }
func (o *countingObserver) OnTooOld(int32)  { o.mu.Lock(); o.tooOld++; o.mu.Unlock() }
func (o *countingObserver) OnHandlerError() { o.mu.Lock(); o.handlerErrs++; o.mu.Unlock() }
func (o *countingObserver) OnRekeyed()      { o.mu.Lock(); o.rekeyed++; o.mu.Unlock() }
func (o *countingObserver) OnDeadLettered(reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dlq == nil {
		o.dlq = map[string]int{}
	}
	o.dlq[reason]++
}

type fixture struct {
	tt   *tester.Tester
	topo *dedup.Topology
	obs  *countingObserver
	out  *tester.QueueTracker
	dlq  *tester.QueueTracker
	now  time.Time
}

func newFixture(t *testing.T, handler dedup.Handler, mutate func(*dedup.Topology)) *fixture {
	t.Helper()
	f := &fixture{tt: tester.New(t), obs: &countingObserver{}, now: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)}
	f.topo = &dedup.Topology{
		Group: "settlement", Inputs: []string{"orders"}, Outputs: []string{"settlements"}, DLQ: "orders-dlq",
		KeyType: dedup.KeyEventID, Retention: 24 * time.Hour,
		EventID: dedup.JSONField("eventId"), Handler: handler,
		HandlerRetries: 2, RetryBackoff: time.Microsecond,
		Hooks: []dedup.Hook{f.obs}, Now: func() time.Time { return f.now },
	}
	if mutate != nil {
		mutate(f.topo)
	}
	if err := f.topo.Validate(); err != nil {
		t.Fatal(err)
	}
	proc, err := goka.NewProcessor(nil, Graph(f.topo, 0, nil), goka.WithTester(f.tt), goka.WithNilHandling(goka.NilProcess))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- proc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("processor: %v", err)
		}
	})
	f.out = f.tt.NewQueueTracker("settlements")
	f.dlq = f.tt.NewQueueTracker("orders-dlq")
	return f
}

func (f *fixture) consume(key, value string, headers goka.Headers) {
	var v []byte
	if value != "\x00null" {
		v = []byte(value)
	}
	f.tt.Consume("orders", key, v, tester.WithHeaders(headers), tester.WithTime(f.now.Add(-time.Second)))
}

func drain(q *tester.QueueTracker) (keys []string, values []string) {
	for {
		k, v, ok := q.NextRaw()
		if !ok {
			return keys, values
		}
		keys, values = append(keys, k), append(values, string(v))
	}
}

func TestTopologyForwardsOnceAndSkipsDuplicates(t *testing.T) {
	tests := []struct {
		name    string
		keyType dedup.KeyType
		key     string // record key of every event
		events  []string
		wantOut int
		wantDup int
	}{
		{"keyed by event id", dedup.KeyEventID, "", []string{`{"eventId":"e1"}`, `{"eventId":"e1"}`, `{"eventId":"e2"}`}, 2, 1},
		{"keyed by aggregate, dedup by event id (rekeyed)", dedup.KeyEventID, "order-1", []string{`{"eventId":"e1","aggregateId":"order-1"}`, `{"eventId":"e1","aggregateId":"order-1"}`, `{"eventId":"e2","aggregateId":"order-1"}`}, 2, 1},
		{"once per aggregate", dedup.KeyAggregateID, "order-1", []string{`{"eventId":"e1","aggregateId":"order-1"}`, `{"eventId":"e2","aggregateId":"order-1"}`, `{"eventId":"e3","aggregateId":"order-2"}`}, 2, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, dedup.Forward(), func(tp *dedup.Topology) { tp.KeyType = tt.keyType })
			for _, ev := range tt.events {
				key := tt.key
				if key == "" {
					e, _ := Envelope(ev)
					key = e.EventID
				}
				f.consume(key, ev, goka.Headers{"trace": []byte("t1")})
			}
			_, values := drain(f.out)
			if len(values) != tt.wantOut || f.obs.skipped != tt.wantDup {
				t.Fatalf("outputs %d (want %d), duplicates %d (want %d)", len(values), tt.wantOut, f.obs.skipped, tt.wantDup)
			}
			if values[0] != tt.events[0] {
				t.Fatalf("forwarded %q, want the input unchanged %q", values[0], tt.events[0])
			}
		})
	}
}

// Envelope decodes a JSON event for tests.
func Envelope(s string) (*wire.Event, error) {
	return wire.Decoder{ID: wire.DefaultIDSource()}.Decode([]byte(s), nil)
}

func TestTopologyStoresSeenRecord(t *testing.T) {
	f := newFixture(t, dedup.Forward(), nil)
	f.consume("e1", `{"eventId":"e1","aggregateId":"a1","occurredAt":"2026-12-02T11:00:00Z"}`, nil)
	v := f.tt.TableValue(goka.GroupTable("settlement"), "e1")
	rec, ok := v.(*codecs.SeenRecord)
	if !ok {
		t.Fatalf("table value %T, want *codecs.SeenRecord", v)
	}
	if rec.Topic != "orders" || rec.AggregateID != "a1" || !rec.FirstProcessed.Equal(f.now) ||
		!rec.ExpiresAt.Equal(f.now.Add(24*time.Hour)) || !rec.EventTime.Equal(time.Date(2026, 12, 2, 11, 0, 0, 0, time.UTC)) {
		t.Fatalf("unexpected record %+v", rec)
	}
}

func TestTopologyExpiredRecordIsProcessedAgain(t *testing.T) {
	f := newFixture(t, dedup.Forward(), nil)
	f.consume("e1", `{"eventId":"e1"}`, nil)
	f.now = f.now.Add(25 * time.Hour)
	f.consume("e1", `{"eventId":"e1"}`, nil)
	if _, values := drain(f.out); len(values) != 2 || f.obs.expired != 1 {
		t.Fatalf("outputs %d, expired %d; want 2 and 1", len(values), f.obs.expired)
	}
}

func TestTopologyDeadLettersBadInput(t *testing.T) {
	tests := []struct {
		value  string
		reason string
	}{
		{"not json", "not-json"},
		{`{"aggregateId":"a"}`, "no-id"},
		{"", "empty-value"},
		{"\x00null", "null-value"},
		{`{"eventId":7}`, "bad-field"},
	}
	f := newFixture(t, dedup.Forward(), nil)
	f.consume("good-1", `{"eventId":"good-1"}`, nil)
	for _, tt := range tests {
		f.consume("k", tt.value, goka.Headers{"trace": []byte("t")})
	}
	f.consume("good-2", `{"eventId":"good-2"}`, nil)

	if _, values := drain(f.out); len(values) != 2 {
		t.Fatalf("good events around the bad ones: %d outputs, want 2", len(values))
	}
	for i, tt := range tests {
		h, key, value, ok := f.dlq.NextRawWithHeaders()
		if !ok {
			t.Fatalf("dead letter %d missing", i)
		}
		if got := string(h[dedup.HeaderDLQReason]); got != tt.reason {
			t.Errorf("record %q: reason %q, want %q", tt.value, got, tt.reason)
		}
		if key != "k" || string(h["trace"]) != "t" || len(h[dedup.HeaderDLQError]) == 0 || string(h[dedup.HeaderDLQTopic]) != "orders" {
			t.Errorf("record %q: dead letter lost its key, headers or error: key=%q headers=%v", tt.value, key, h)
		}
		if tt.value != "\x00null" && string(value) != tt.value {
			t.Errorf("dead letter value %q, want the input %q", value, tt.value)
		}
	}
}

func TestTopologyHandlerErrorLeavesEventUnmarked(t *testing.T) {
	calls, failUntil := 0, 100
	h := dedup.HandlerFunc(func(ctx context.Context, ev *dedup.Event) ([]dedup.Message, error) {
		calls++
		if calls <= failUntil {
			return nil, errors.New("downstream down")
		}
		return dedup.Forward().Handle(ctx, ev)
	})
	f := newFixture(t, h, nil)
	f.consume("e1", `{"eventId":"e1"}`, nil)
	if calls != 3 || f.obs.handlerErrs != 3 {
		t.Fatalf("handler called %d times (%d errors), want 1 + 2 retries", calls, f.obs.handlerErrs)
	}
	if hdr, _, _, ok := f.dlq.NextRawWithHeaders(); !ok || string(hdr[dedup.HeaderDLQReason]) != dedup.ReasonHandlerError {
		t.Fatalf("failed event not dead-lettered with reason handler-error")
	}
	if v := f.tt.TableValue(goka.GroupTable("settlement"), "e1"); v != nil {
		t.Fatalf("failed event was marked seen: %+v", v)
	}
	// A re-drive processes it.
	failUntil = 0
	f.consume("e1", `{"eventId":"e1"}`, nil)
	if _, values := drain(f.out); len(values) != 1 {
		t.Fatalf("re-driven event: %d outputs, want 1", len(values))
	}
}

func TestTopologyValidate(t *testing.T) {
	good := func() *dedup.Topology {
		return &dedup.Topology{Group: "g", Inputs: []string{"in"}, Outputs: []string{"out"}, DLQ: "dlq", Handler: dedup.Forward(),
			KeyType: dedup.KeyEventID, Retention: time.Hour, EventID: dedup.JSONField("eventId")}
	}
	tests := []struct {
		name   string
		mutate func(*dedup.Topology)
	}{
		{"no group", func(t *dedup.Topology) { t.Group = "" }},
		{"input is output", func(t *dedup.Topology) { t.Outputs = []string{"in"} }},
		{"input is dlq", func(t *dedup.Topology) { t.DLQ = "in" }},
		{"no handler", func(t *dedup.Topology) { t.Handler = nil }},
		{"bad key type", func(t *dedup.Topology) { t.KeyType = "x" }},
		{"negative retries", func(t *dedup.Topology) { t.HandlerRetries = -1 }},
		{"bad rekey policy", func(t *dedup.Topology) { t.Rekey = "sometimes" }},
	}
	if err := good().Validate(); err != nil {
		t.Fatalf("good topology: %v", err)
	}
	for _, tt := range tests {
		tp := good()
		tt.mutate(tp)
		if tp.Validate() == nil {
			t.Errorf("%s: Validate accepted it", tt.name)
		}
	}
}

func TestTopologyStaleEventPolicies(t *testing.T) {
	tests := []struct {
		policy  dedup.StalePolicy
		outputs int
		dlq     int
		marked  bool
	}{
		{dedup.StaleProcess, 1, 0, true},
		{"", 1, 0, true},
		{dedup.StaleSkip, 0, 0, false},
		{dedup.StaleDeadLetter, 0, 1, false},
	}
	for _, tt := range tests {
		t.Run(string(tt.policy), func(t *testing.T) {
			f := newFixture(t, dedup.Forward(), func(tp *dedup.Topology) { tp.StaleEvents = tt.policy })
			// occurredAt two days back, retention one day.
			f.consume("e1", `{"eventId":"e1","occurredAt":"2026-11-30T12:00:00Z"}`, nil)
			_, outs := drain(f.out)
			_, dlq := drain(f.dlq)
			marked := f.tt.TableValue(goka.GroupTable("settlement"), "e1") != nil
			if len(outs) != tt.outputs || len(dlq) != tt.dlq || marked != tt.marked || f.obs.tooOld != 1 {
				t.Fatalf("outputs %d dlq %d marked %v tooOld %d; want %d %d %v 1", len(outs), len(dlq), marked, f.obs.tooOld, tt.outputs, tt.dlq, tt.marked)
			}
		})
	}
}
