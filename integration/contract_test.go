package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/processor"
)

// runtimes are the two runtimes a topology runs on; the handler contract
// holds on both, except what goka's context cannot carry (header order).
var runtimes = []struct {
	name         string
	orderedHeads bool
	start        func(e *env, topo *dedup.Topology, stateDir string) *worker
}{
	{"exactly-once", true, func(e *env, topo *dedup.Topology, dir string) *worker {
		return e.startEOS(topo, processor.Config{StateDir: dir})
	}},
	{"goka", false, func(e *env, topo *dedup.Topology, dir string) *worker { return e.start(topo, dir) }},
}

// TestHandlerContract runs one handler that rejects an event (Permanent),
// panics on another and writes the rest to two outputs with repeated header
// keys, on a real broker: the rejected and the poison event are
// dead-lettered with their reasons and their input position, every other
// event's messages arrive in the order the handler returned them, and the
// worker keeps running.
func TestHandlerContract(t *testing.T) {
	for _, rt := range runtimes {
		t.Run(rt.name, func(t *testing.T) {
			e := newEnv(t, 3)
			group := e.group("contract")
			audit := unique("audit")
			dropTopics(t, e.brokers, audit)
			var mu sync.Mutex
			calls := map[string]int{}
			var badHeaders []string
			topo := e.topology(group, &counter{})
			topo.Outputs = append(topo.Outputs, audit)
			topo.Handler = dedup.HandlerFunc(func(_ context.Context, ev *dedup.Event) ([]dedup.Message, error) {
				mu.Lock()
				calls[ev.EventID]++
				if x := ev.Headers; rt.orderedHeads && (len(x) != 2 || string(x[0].Value) != "1" || string(x[1].Value) != "2") {
					badHeaders = append(badHeaders, fmt.Sprintf("%s: %v", ev.EventID, x))
				}
				mu.Unlock()
				switch ev.EventID {
				case "perm":
					return nil, dedup.Permanent(errors.New("rejected by a business rule"))
				case "poison":
					panic("poison event")
				}
				pos := fmt.Sprintf("%s/%d@%d", ev.Topic, ev.Partition, ev.Offset)
				return []dedup.Message{
					{Topic: e.output, Key: ev.EventID, Value: []byte("1"), Headers: dedup.Headers{{Key: "h", Value: []byte("a")}, {Key: "h", Value: []byte("b")}}},
					{Topic: audit, Key: ev.EventID, Value: []byte(pos)},
					{Topic: e.output, Key: ev.EventID, Value: []byte("2")},
				}, nil
			})
			w := rt.start(e, topo, t.TempDir())

			twice := []sarama.RecordHeader{{Key: []byte("x"), Value: []byte("1")}, {Key: []byte("x"), Value: []byte("2")}}
			var in []kafkatest.Record
			for _, id := range []string{"a", "perm", "b", "poison", "c"} {
				r := event(id, "agg-"+id) // keyed by aggregate: re-keyed by event ID
				r.HeaderList = twice
				in = append(in, r)
			}
			written := e.produce(in...)
			e.waitProcessed(group)

			select {
			case err := <-w.done:
				t.Fatalf("worker stopped: %v", err)
			default:
			}
			if len(badHeaders) > 0 {
				t.Errorf("handler saw headers out of order or lost: %v", badHeaders)
			}
			if calls["perm"] != 1 || calls["poison"] != 1 {
				t.Errorf("handler calls %v: a permanent error and a panic are not retried", calls)
			}
			wantPos := map[string]string{} // event ID -> its input record
			for _, r := range written {
				wantPos[r.Key[len("agg-"):]] = fmt.Sprintf("%s/%d@%d", e.input, r.Partition, r.Offset)
			}

			// Outputs: per event "1" then "2" (same key, same partition).
			byKey := map[string][]kafkatest.Record{}
			for _, r := range e.read(e.output) {
				byKey[r.Key] = append(byKey[r.Key], r)
			}
			for _, id := range []string{"a", "b", "c"} {
				recs := byKey[id]
				if len(recs) != 2 || string(recs[0].Value) != "1" || string(recs[1].Value) != "2" {
					t.Errorf("output of %s: %d records %q, want \"1\" then \"2\"", id, len(recs), values(recs))
					continue
				}
				h := recs[0].HeaderList
				if rt.orderedHeads && (len(h) != 2 || string(h[0].Value) != "a" || string(h[1].Value) != "b") {
					t.Errorf("output of %s: headers %v, want h=a then h=b", id, h)
				}
			}
			for _, id := range []string{"perm", "poison"} {
				if len(byKey[id]) != 0 {
					t.Errorf("%s reached the output", id)
				}
			}
			auditRecs := e.read(audit)
			if len(auditRecs) != 3 {
				t.Errorf("audit has %d records, want 3", len(auditRecs))
			}
			for _, r := range auditRecs {
				if string(r.Value) != wantPos[r.Key] {
					t.Errorf("audit of %s: handler saw position %s, want the input record's %s", r.Key, r.Value, wantPos[r.Key])
				}
			}

			dlq := e.read(group + "-dlq")
			reasons := map[string]string{}
			for _, r := range dlq {
				id := r.Key[len("agg-"):]
				reasons[id] = string(r.Headers[dedup.HeaderDLQReason])
				src := fmt.Sprintf("%s/%s@%s", r.Headers[dedup.HeaderDLQTopic], r.Headers[dedup.HeaderDLQPartition], r.Headers[dedup.HeaderDLQOffset])
				if src != wantPos[id] {
					t.Errorf("dead letter of %s names %s, want the input record %s", id, src, wantPos[id])
				}
			}
			if len(dlq) != 2 || reasons["perm"] != dedup.ReasonHandlerPermanent || reasons["poison"] != dedup.ReasonHandlerPanic {
				t.Errorf("dead letters %v, want perm as %s and poison as %s", reasons, dedup.ReasonHandlerPermanent, dedup.ReasonHandlerPanic)
			}
		})
	}
}

func values(recs []kafkatest.Record) []string {
	var v []string
	for _, r := range recs {
		v = append(v, string(r.Value))
	}
	return v
}

// TestHandlerInterruptedByShutdown stops the worker while its handler waits
// on a slow call and returns ctx.Err(), as a well-behaved handler does: the
// event must not be dead-lettered nor committed, and the next owner
// processes it exactly once.
func TestHandlerInterruptedByShutdown(t *testing.T) {
	for _, rt := range runtimes {
		t.Run(rt.name, func(t *testing.T) {
			e := newEnv(t, 1)
			group := e.group("interrupt")
			entered := make(chan struct{})
			var once sync.Once
			topo := e.topology(group, &counter{})
			topo.Handler = dedup.HandlerFunc(func(ctx context.Context, ev *dedup.Event) ([]dedup.Message, error) {
				if ev.EventID == "slow" {
					once.Do(func() { close(entered) })
					<-ctx.Done() // a downstream call that honours its context
					return nil, ctx.Err()
				}
				return dedup.Forward().Handle(ctx, ev)
			})
			in := []kafkatest.Record{event("a", "a"), event("slow", "slow"), event("b", "b")}
			written := e.produce(in...)
			w := rt.start(e, topo, t.TempDir())
			select {
			case <-entered:
			case <-time.After(60 * time.Second):
				t.Fatal("the handler never got the slow event")
			}
			w.stop(t)

			if dlq := e.read(group + "-dlq"); len(dlq) != 0 {
				t.Fatalf("%d dead letters after the shutdown (reason %s), want none: an interrupted event is not a failure",
					len(dlq), dlq[0].Headers[dedup.HeaderDLQReason])
			}
			committed, err := kafkatest.Committed(e.brokers, group, e.input, []int32{0})
			if err != nil {
				t.Fatal(err)
			}
			if slow := written[1].Offset; committed[0] > slow {
				t.Fatalf("offset %d committed past the interrupted event at %d", committed[0], slow)
			}

			// The next owner, with a handler that is not slow.
			next := e.topology(group, &counter{})
			rt.start(e, next, t.TempDir())
			e.waitProcessed(group)
			e.exactlyOnce(in)
			if dlq := e.read(group + "-dlq"); len(dlq) != 0 {
				t.Fatalf("%d dead letters, want none", len(dlq))
			}
		})
	}
}
