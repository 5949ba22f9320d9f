package engine

import (
	"fmt"

	"github.com/dedupkit/dedup"

	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lovoo/goka"
)

func TestHandlerPermanentErrorIsNotRetried(t *testing.T) {
	calls := 0
	h := dedup.HandlerFunc(func(context.Context, *dedup.Event) ([]dedup.Message, error) {
		calls++
		return nil, dedup.Permanent(errors.New("payload rejected"))
	})
	f := newFixture(t, h, nil)
	f.consume("e1", `{"eventId":"e1"}`, nil)
	if calls != 1 {
		t.Fatalf("handler called %d times, want 1 (no retries for a permanent error)", calls)
	}
	hdr, _, _, ok := f.dlq.NextRawWithHeaders()
	if !ok || string(hdr[dedup.HeaderDLQReason]) != dedup.ReasonHandlerPermanent || !strings.Contains(string(hdr[dedup.HeaderDLQError]), "payload rejected") {
		t.Fatalf("dead letter %v (found %v), want reason %s with the error", hdr, ok, dedup.ReasonHandlerPermanent)
	}
	if v := f.tt.TableValue(goka.GroupTable("settlement"), "e1"); v != nil {
		t.Fatalf("rejected event was marked seen: %+v", v)
	}
}

func TestHandlerPanicIsDeadLetteredAndTheWorkerGoesOn(t *testing.T) {
	h := dedup.HandlerFunc(func(ctx context.Context, ev *dedup.Event) ([]dedup.Message, error) {
		if ev.EventID == "poison" {
			var m map[string]int
			//lint:ignore SA5000 the write to a nil map is the runtime panic under test
			m["boom"]++ // a nil map write: a real bug, not a panic("...")
		}
		return dedup.Forward().Handle(ctx, ev)
	})
	f := newFixture(t, h, nil)
	f.consume("poison", `{"eventId":"poison"}`, nil)
	f.consume("e2", `{"eventId":"e2"}`, nil)
	hdr, key, _, ok := f.dlq.NextRawWithHeaders()
	if !ok || string(hdr[dedup.HeaderDLQReason]) != dedup.ReasonHandlerPanic || key != "poison" ||
		!strings.Contains(string(hdr[dedup.HeaderDLQError]), "assignment to entry in nil map") {
		t.Fatalf("dead letter %v key %q (found %v), want reason %s naming the panic", hdr, key, ok, dedup.ReasonHandlerPanic)
	}
	if _, values := drain(f.out); len(values) != 1 || !strings.Contains(values[0], "e2") {
		t.Fatalf("outputs after the panic: %v, want e2's", values)
	}
	if f.obs.handlerErrs != 1 {
		t.Fatalf("handler errors %d, want 1: a panic is not retried", f.obs.handlerErrs)
	}
}

func TestHandlerWritesToSeveralOutputsInOrder(t *testing.T) {
	h := dedup.HandlerFunc(func(_ context.Context, ev *dedup.Event) ([]dedup.Message, error) {
		return []dedup.Message{
			{Topic: "audit", Key: "a1", Value: []byte("first")},
			{Topic: "settlements", Key: "s1", Value: []byte("second")},
			{Topic: "audit", Key: "a2", Value: []byte("third")},
		}, nil
	})
	f := newFixture(t, h, func(tp *dedup.Topology) { tp.Outputs = []string{"settlements", "audit"} })
	audit := f.tt.NewQueueTracker("audit")
	f.consume("e1", `{"eventId":"e1"}`, nil)
	if keys, values := drain(audit); strings.Join(keys, ",") != "a1,a2" || strings.Join(values, ",") != "first,third" {
		t.Fatalf("audit got %v %v, want a1,a2 first,third", keys, values)
	}
	if keys, _ := drain(f.out); strings.Join(keys, ",") != "s1" {
		t.Fatalf("settlements got %v, want s1", keys)
	}
}

func TestHandlerOutputToAnUndeclaredTopicDeadLettersTheEvent(t *testing.T) {
	tests := []struct {
		name    string
		outputs []string
		msgs    []dedup.Message
	}{
		{"unknown topic", []string{"settlements"}, []dedup.Message{{Key: "ok"}, {Topic: "elsewhere", Key: "x"}}},
		{"no topic with two outputs", []string{"settlements", "audit"}, []dedup.Message{{Key: "x"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := dedup.HandlerFunc(func(context.Context, *dedup.Event) ([]dedup.Message, error) { return tt.msgs, nil })
			f := newFixture(t, h, func(tp *dedup.Topology) { tp.Outputs = tt.outputs })
			f.consume("e1", `{"eventId":"e1"}`, nil)
			if _, values := drain(f.out); len(values) != 0 {
				t.Fatalf("%d outputs written, want none: the event's output is all or nothing", len(values))
			}
			hdr, _, _, ok := f.dlq.NextRawWithHeaders()
			if !ok || string(hdr[dedup.HeaderDLQReason]) != dedup.ReasonBadOutput {
				t.Fatalf("dead letter %v (found %v), want reason %s", hdr, ok, dedup.ReasonBadOutput)
			}
			if v := f.tt.TableValue(goka.GroupTable("settlement"), "e1"); v != nil {
				t.Fatalf("event marked seen: %+v", v)
			}
		})
	}
}

func TestHandlerSeesTheRecord(t *testing.T) {
	var got *dedup.Event
	h := dedup.HandlerFunc(func(ctx context.Context, ev *dedup.Event) ([]dedup.Message, error) {
		got = ev
		return nil, nil
	})
	f := newFixture(t, h, nil)
	value := `{"eventId":"e1","aggregateId":"order-1","type":"OrderPaid","payload":{"n":1}}`
	f.consume("order-1", value, goka.Headers{"trace": []byte("t1")}) // re-keyed: judged after the loop
	if got == nil {
		t.Fatal("handler not called")
	}
	tr, _ := got.Headers.Get("trace")
	if got.Topic != "orders" || got.Key != "order-1" || string(got.Value) != value || got.EventID != "e1" ||
		got.AggregateID != "order-1" || got.Type != "OrderPaid" || string(tr) != "t1" ||
		got.Timestamp.IsZero() || len(got.Headers) != 1 {
		t.Fatalf("handler saw %+v (headers %v), want the input record's position, key, headers, value and IDs", got, got.Headers)
	}
}

// A handler that returns because its context ended must leave nothing of
// the event: under goka's runtime the callback fails, so goka commits no
// offset for it.
func TestHandlerInterruptedIsNotDeadLettered(t *testing.T) {
	topo := &dedup.Topology{Group: "g", Inputs: []string{"in"}, Outputs: []string{"out"}, DLQ: "dlq", HandlerRetries: 3, RetryBackoff: time.Hour,
		KeyType: dedup.KeyEventID, Retention: time.Hour, EventID: dedup.JSONField("eventId")}
	tests := []struct {
		name    string
		handler dedup.HandlerFunc
	}{
		{"returns ctx.Err()", func(ctx context.Context, _ *dedup.Event) ([]dedup.Message, error) { return nil, ctx.Err() }},
		{"fails, then the backoff is cut short", func(ctx context.Context, _ *dedup.Event) ([]dedup.Message, error) {
			return nil, errors.New("downstream down")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			topo.Handler = tt.handler
			ctx, cancel := context.WithCancel(context.Background())
			if tt.name == "returns ctx.Err()" {
				cancel()
			} else {
				time.AfterFunc(10*time.Millisecond, cancel)
			}
			defer cancel()
			_, reason, err := handle(topo, ctx, &dedup.Event{EventID: "e1"})
			if !errors.Is(err, dedup.ErrInterrupted) || reason != "" {
				t.Fatalf("handle: reason %q err %v, want dedup.ErrInterrupted and no dead-letter reason", reason, err)
			}
		})
	}
}

// Every event-ID source finds its ID, or names why not.
func TestIDSources(t *testing.T) {
	ce := dedup.Headers{{Key: "ce_id", Value: []byte("c1")}, {Key: "ce_source", Value: []byte("/orders")}}
	tests := []struct {
		name    string
		src     dedup.IDSource
		rec     dedup.Record
		wantKey string
		reason  string
	}{
		{"nested JSON", dedup.JSONField("meta.id"), dedup.Record{Value: []byte(`{"meta":{"id":"m1"}}`)}, "m1", ""},
		{"nested JSON missing", dedup.JSONField("meta.id"), dedup.Record{Value: []byte(`{"id":"m1"}`)}, "", "no-id"},
		{"header", dedup.HeaderID("x-id", ""), dedup.Record{Value: []byte("opaque"), Headers: dedup.Headers{{Key: "x-id", Value: []byte("h1")}}}, "h1", ""},
		{"CloudEvents", dedup.CloudEvents(), dedup.Record{Value: []byte("data"), Headers: ce}, "/orders\x00c1", ""},
		{"CloudEvents without source", dedup.CloudEvents(), dedup.Record{Value: []byte("data"), Headers: ce[:1]}, "", "no-id"},
		{"CloudEvents, ce_id twice", dedup.CloudEvents(), dedup.Record{Value: []byte("data"), Headers: append(ce[:2:2], dedup.Header{Key: "ce_id", Value: []byte("c2")})}, "", "duplicate-field"},
		{"CloudEvents, ce_source twice", dedup.CloudEvents(), dedup.Record{Value: []byte("data"), Headers: append(ce[:2:2], dedup.Header{Key: "ce_source", Value: []byte("/other")})}, "", "duplicate-field"},
		{"CloudEvents, ce_id repeated unchanged", dedup.CloudEvents(), dedup.Record{Value: []byte("data"), Headers: append(ce[:2:2], dedup.Header{Key: "ce_id", Value: []byte("c1")})}, "/orders\x00c1", ""},
		{"CloudEvents, other header twice", dedup.CloudEvents(), dedup.Record{Value: []byte("data"), Headers: append(ce[:2:2], dedup.Header{Key: "x", Value: []byte("1")}, dedup.Header{Key: "x", Value: []byte("2")})}, "/orders\x00c1", ""},
		{"CloudEvents, NUL in ce_source", dedup.CloudEvents(), dedup.Record{Value: []byte("data"), Headers: dedup.Headers{{Key: "ce_id", Value: []byte("c")}, {Key: "ce_source", Value: []byte("a\x00b")}}}, "", "bad-field"},
		{"JSON ID twice", dedup.JSONField("eventId"), dedup.Record{Value: []byte(`{"eventId":"a","eventId":"b"}`)}, "", "duplicate-field"},
		{"record key", dedup.RecordKey(), dedup.Record{Key: "k1", Value: []byte("opaque")}, "k1", ""},
		{"record key empty", dedup.RecordKey(), dedup.Record{Value: []byte("opaque")}, "", "no-id"},
		{"record key, tombstone", dedup.RecordKey(), dedup.Record{Key: "k1"}, "", "null-value"},
		{"function", dedup.IDFunc(func(r dedup.Record) (string, error) { return r.Key + "-x", nil }), dedup.Record{Key: "k", Value: []byte("v")}, "k-x", ""},
		{"function fails", dedup.IDFunc(func(dedup.Record) (string, error) { return "", errors.New("no") }), dedup.Record{Value: []byte("v")}, "", "no-id"},
		{"function, ID too long", dedup.IDFunc(func(dedup.Record) (string, error) { return strings.Repeat("i", 300), nil }), dedup.Record{Value: []byte("v")}, "", "id-too-long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			topo, err := dedup.Define("g", dedup.Input("in"), dedup.Output("out"), dedup.EventID(tt.src))
			if err != nil {
				t.Fatal(err)
			}
			tt.rec.Topic = "in"
			p := Prepare(topo, tt.rec)
			if p.reason != tt.reason || p.key != tt.wantKey {
				t.Fatalf("key %q reason %q (%v), want key %q reason %q", p.key, p.reason, p.err, tt.wantKey, tt.reason)
			}
		})
	}
}

// A handler that returns an error wrapping dedup.ErrInterrupted while its
// context goes on (a resource that cannot commit) is not retried and not
// dead-lettered: the runtime aborts the transaction and the event comes
// again.
func TestHandlerAskingForTheAbortIsNotRetried(t *testing.T) {
	calls := 0
	topo := &dedup.Topology{Group: "g", Inputs: []string{"in"}, Outputs: []string{"out"}, DLQ: "dlq", HandlerRetries: 3, RetryBackoff: time.Hour,
		KeyType: dedup.KeyEventID, Retention: time.Hour, EventID: dedup.JSONField("eventId"),
		Handler: dedup.HandlerFunc(func(context.Context, *dedup.Event) ([]dedup.Message, error) {
			calls++
			return nil, fmt.Errorf("%w: database connection lost", dedup.ErrInterrupted)
		})}
	_, reason, err := handle(topo, context.Background(), &dedup.Event{EventID: "e1"})
	if !errors.Is(err, dedup.ErrInterrupted) || reason != "" || calls != 1 {
		t.Fatalf("handle: reason %q err %v after %d calls, want dedup.ErrInterrupted, no dead-letter reason, 1 call", reason, err, calls)
	}
}
