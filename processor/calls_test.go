package processor

import (
	"testing"

	"github.com/IBM/sarama"
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
			cs := newCalls(10, nil)
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

// TestCallsParkBehindABusyKey: a record of a key with a call running, or
// with records parked, is parked behind them, and starts once it is first
// behind each of its keys with none running, in the order taken.
func TestCallsParkBehindABusyKey(t *testing.T) {
	cs := newCalls(4, nil)
	off := int64(0)
	rec := func(keys ...string) *flight {
		off++
		f := &flight{in: inbound{msg: &sarama.ConsumerMessage{Offset: off}}, tp: topicPartition{"in", 0}}
		copy(f.keys[:], keys)
		return f
	}
	running := rec("evt-1", "acct-1")
	cs.note(running)
	cases := []struct {
		keys [2]string
		want bool
	}{
		{[2]string{"evt-1", ""}, true},       // a copy of the running event
		{[2]string{"evt-2", "acct-1"}, true}, // the same account
		{[2]string{"evt-2", "acct-2"}, false},
		{[2]string{"evt-2", ""}, false},
	}
	for _, c := range cases {
		if got := cs.blocked(c.keys); got != c.want {
			t.Errorf("blocked(%v) = %v with %v running, want %v", c.keys, got, running.keys, c.want)
		}
	}
	copyOf := rec("evt-1", "acct-1")
	cs.park(copyOf)
	sameAccount := rec("evt-3", "acct-1")
	if !cs.blocked(sameAccount.keys) {
		t.Fatal("a record of an account with a record parked is not blocked")
	}
	cs.park(sameAccount)
	if f := cs.nextReady(); f != nil {
		t.Fatalf("%v ready while evt-1 runs", f.keys)
	}
	cs.stopped(running)
	if f := cs.nextReady(); f != copyOf {
		t.Fatalf("after evt-1 returned, ready %v, want the copy of evt-1 first", f)
	}
	if f := cs.nextReady(); f != nil {
		t.Fatalf("%v ready while the copy of evt-1, first for acct-1, is not done", f.keys)
	}
	cs.wake(copyOf.keys) // the copy was a duplicate: done at once
	if f := cs.nextReady(); f != sameAccount {
		t.Fatalf("ready %v, want evt-3 of acct-1", f)
	}
	if cs.parked != 0 || cs.blocked(sameAccount.keys) {
		t.Fatalf("%d parked, blocked %v after both left their queues", cs.parked, cs.blocked(sameAccount.keys))
	}
	// Parked records held their offsets: the partition commits nothing
	// past the oldest until it is done.
	if got := cs.done(topicPartition{"in", 0}, running.in.msg.Offset, true); got != copyOf.in.msg.Offset {
		t.Fatalf("commit %d after evt-1, want %d: the parked copy holds it", got, copyOf.in.msg.Offset)
	}
}
