package processor

import (
	"testing"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/metrics"
)

// TestCallsCommitThePrefixOfDoneEvents drives the calls' bookkeeping
// through events that finish out of order: the offset to commit never
// passes an event whose call has not finished, and an interrupted call
// pins its partition.
func TestCallsCommitThePrefixOfDoneEvents(t *testing.T) {
	a, b := topicPartition{"in", 0}, topicPartition{"in", 1}
	flightAt := func(tp topicPartition, off int64, key string) *flight {
		f := &flight{in: inbound{msg: &sarama.ConsumerMessage{Topic: tp.topic, Partition: tp.partition, Offset: off}}, tp: tp}
		f.keys[0] = key
		return f
	}
	type step struct {
		op   string // start, stop (the call returned), done (finished), sync (an event without a call)
		tp   topicPartition
		off  int64
		want int64 // done and sync: the offset to commit
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"no calls: every event commits past itself", []step{
			{"sync", a, 0, 1}, {"sync", a, 1, 2}, {"sync", b, 7, 8},
		}},
		{"a later event done first waits for the earlier", []step{
			{"start", a, 10, 0}, {"start", a, 11, 0}, {"sync", a, 12, 10},
			{"stop", a, 11, 0}, {"done", a, 11, 10},
			{"stop", a, 10, 0}, {"done", a, 10, 13},
		}},
		{"partitions are apart", []step{
			{"start", a, 10, 0}, {"sync", b, 5, 6}, {"start", b, 6, 0},
			{"stop", a, 10, 0}, {"done", a, 10, 11}, {"sync", b, 7, 6},
			{"stop", b, 6, 0}, {"done", b, 6, 8},
		}},
		{"an interrupted call pins its partition", []step{
			{"start", a, 3, 0}, {"start", a, 4, 0},
			{"stop", a, 3, 0}, // interrupted: never done
			{"stop", a, 4, 0}, {"done", a, 4, 3}, {"sync", a, 5, 3},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cs := newCalls(10, nopCallHooks{})
			flights := map[topicPartition]map[int64]*flight{}
			for i, s := range c.steps {
				switch s.op {
				case "start":
					f := flightAt(s.tp, s.off, s.tp.topic+string(rune('a'+s.off)))
					if flights[s.tp] == nil {
						flights[s.tp] = map[int64]*flight{}
					}
					flights[s.tp][s.off] = f
					cs.note(f)
				case "stop":
					cs.stopped(flights[s.tp][s.off])
				case "done", "sync":
					if got := cs.done(s.tp, s.off, s.op == "done"); got != s.want {
						t.Fatalf("step %d (%s %v@%d): commit %d, want %d", i, s.op, s.tp, s.off, got, s.want)
					}
				}
			}
		})
	}
}

// TestCallsHoldBackABusyKey: a record waits while a call of its dedup key
// or (ordered by record key) its record key runs, and while every call is
// taken.
func TestCallsHoldBackABusyKey(t *testing.T) {
	cs := newCalls(2, nopCallHooks{})
	f := &flight{in: inbound{msg: &sarama.ConsumerMessage{Offset: 1}}, keys: [2]string{"evt-1", "acct-1"}}
	cs.note(f)
	cases := []struct {
		keys [2]string
		want bool
	}{
		{[2]string{"evt-1", ""}, false},       // the same event again: judged after the first
		{[2]string{"evt-2", "acct-1"}, false}, // the same account, in order
		{[2]string{"evt-2", "acct-2"}, true},
		{[2]string{"evt-2", ""}, true},
	}
	for _, c := range cases {
		if got := cs.free(c.keys); got != c.want {
			t.Errorf("free(%v) = %v with %v running, want %v", c.keys, got, f.keys, c.want)
		}
	}
	g := &flight{in: inbound{msg: &sarama.ConsumerMessage{Offset: 2}}, keys: [2]string{"evt-3", ""}}
	cs.note(g)
	if cs.free([2]string{"evt-4", ""}) {
		t.Error("a third call started while the limit is 2")
	}
	cs.stopped(f)
	if !cs.free([2]string{"evt-1", "acct-1"}) {
		t.Error("evt-1's key still busy after its call returned")
	}
}

// The worker's metrics are told of the calls.
var _ CallHooks = (*metrics.Runtime)(nil)
