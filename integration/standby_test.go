package integration

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/processor"
)

// restoreHooks counts the changelog records the member's restores read
// (standbys report none: only a takeover's restore does).
type restoreHooks struct {
	openHooks
	restored int64
}

func (h *restoreHooks) OnRestoreProgress(p int32, records, remaining int64) {
	h.mu.Lock()
	h.restored += records
	h.mu.Unlock()
	h.openHooks.OnRestoreProgress(p, records, remaining)
}

func (h *restoreHooks) read() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.restored
}

// TestStandbyReplicas: with one standby replica, a worker that joins warms
// its share up before it takes it over, and a worker that leaves hands its
// partitions to the one holding their standbys: in both takeovers the new
// owner's restore reads only the changelog's tail, not the table. Without
// standbys the same steps restore every record of the moved partitions
// (the control), and the output is exactly-once either way.
func TestStandbyReplicas(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replicas int
	}{{"one standby", 1}, {"control: no standby", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 4)
			group := e.group(fmt.Sprintf("standby%d", tc.replicas))
			hooksA := &restoreHooks{}
			a := e.startEOS(e.topology(group, &counter{}), processor.Config{StateDir: t.TempDir(), Hooks: []processor.Hook{hooksA},
				Group: processor.Group{StandbyReplicas: tc.replicas, LeaveOnStop: true}})
			until(t, 60*time.Second, "A to hold every partition", func() bool { return a.ready() && len(hooksA.held()) == 4 })
			first := events("sb1", 2000) // about 500 seen IDs per partition's changelog
			e.produce(first...)
			e.waitProcessed(group)

			hooksB := &restoreHooks{}
			b := e.startEOS(e.topology(group, &counter{}), processor.Config{StateDir: t.TempDir(), Hooks: []processor.Hook{hooksB},
				Group: processor.Group{StandbyReplicas: tc.replicas}})
			until(t, 90*time.Second, "A and B to hold 2 partitions each", func() bool {
				return a.ready() && b.ready() && len(hooksA.held()) == 2 && len(hooksB.held()) == 2
			})
			joined := hooksB.read()
			second := events("sb2", 400)
			e.produce(append(second, first[:200]...)...)
			e.waitProcessed(group)

			before := hooksB.read()
			a.stop(t) // for good: it leaves the group
			until(t, 60*time.Second, "B to hold every partition", func() bool { return b.ready() && len(hooksB.held()) == 4 })
			tookOver := hooksB.read() - before
			third := events("sb3", 400)
			e.produce(append(third, second[:100]...)...)
			e.waitProcessed(group)
			e.exactlyOnce(append(append(first, second...), third...))
			t.Logf("B restored %d changelog records when it joined, %d when A left", joined, tookOver)

			// The 2 partitions that moved each hold about 500 seen IDs.
			const tail = 200
			if tc.replicas > 0 {
				if joined > tail || tookOver > tail {
					t.Errorf("with a standby B restored %d records when it joined and %d when A left; want the tails only (at most %d)",
						joined, tookOver, tail)
				}
			} else if joined < 600 || tookOver < 600 {
				t.Errorf("without standbys B restored %d records when it joined and %d when A left; want whole tables (the control is broken)",
					joined, tookOver)
			}
		})
	}
}

// warmHooks holds a member's standbys at their first catch-up until
// released, so its warm-ups cannot finish, and records which input
// partitions it consumed and the records it committed meanwhile.
type warmHooks struct {
	tableHooks
	input   string
	release chan struct{}
	inputs  map[int32]bool // input partitions the member reported lag for
	written int            // records the member committed
}

func (h *warmHooks) OnStandbyLag(_ int32, records int64) {
	if records > 0 {
		<-h.release
	}
}

func (h *warmHooks) OnConsumerLag(topic string, p int32, _ int64) {
	if topic != h.input {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inputs[p] = true
}

func (h *warmHooks) OnTxnCommitted(_ time.Duration, records int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.written += records
}

func (h *warmHooks) consumed() (inputs, written int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.inputs), h.written
}

// mixedEvents is events with every other one keyed by its ID: the table
// partition it arrived in judges those, the others are re-keyed. They are
// spread over the partitions round robin, not by the worker's key hash, as
// by a producer with another partitioner: an event keyed by its ID is then
// judged in a partition its key does not hash to.
func mixedEvents(prefix string, n int, partitions int32) []kafkatest.Record {
	recs := events(prefix, n)
	for i := range recs {
		if i%2 == 0 {
			recs[i].Key = fmt.Sprintf("%s-%d", prefix, i)
		}
		recs[i].Partition = int32(i) % partitions
	}
	return recs
}

// produceTo writes recs to the input, each to its Partition.
func (e *env) produceTo(recs ...kafkatest.Record) {
	e.t.Helper()
	if _, err := kafkatest.ProduceTo(e.brokers, e.input, recs); err != nil {
		e.t.Fatal(err)
	}
}

// TestJoinConsumesInputsWhileItWarmsUp: with a standby replica, a worker
// that joins consumes its share of the input at once, while its warm-up
// standbys copy the tables it will own. It forwards the events it would
// judge in those tables to the loop partitions of the same numbers, whose
// owner keeps judging them, so copies of earlier events are still skipped.
// Once warm it owns the tables too. The output is exactly-once throughout.
func TestJoinConsumesInputsWhileItWarmsUp(t *testing.T) {
	e := newEnv(t, 4)
	group := e.group("inputfirst")
	hooksA := &restoreHooks{}
	a := e.startEOS(e.topology(group, &counter{}), processor.Config{StateDir: t.TempDir(), Hooks: []processor.Hook{hooksA},
		Group: processor.Group{StandbyReplicas: 1, LeaveOnStop: true}})
	until(t, 60*time.Second, "A to hold every partition", func() bool { return a.ready() && len(hooksA.held()) == 4 })
	first := mixedEvents("if1", 2000, 4)
	e.produceTo(first...)
	e.waitProcessed(group)

	hooksB := &warmHooks{input: e.input, release: make(chan struct{}), inputs: map[int32]bool{}}
	b := e.startEOS(e.topology(group, &counter{}), processor.Config{StateDir: t.TempDir(), Hooks: []processor.Hook{hooksB},
		Group: processor.Group{StandbyReplicas: 1}})
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(hooksB.release) }) }) // before B stops (cleanups run last first)
	until(t, 90*time.Second, "B to consume input partitions while its warm-ups are held", func() bool {
		inputs, _ := hooksB.consumed()
		return inputs == 2
	})
	second := mixedEvents("if2", 400, 4)
	e.produceTo(append(second, first[:200]...)...)
	e.waitProcessed(group)
	if _, written := hooksB.consumed(); written == 0 || len(hooksB.held()) != 0 {
		t.Fatalf("while warming up B committed %d records and holds tables %v; want some records and no table", written, hooksB.held())
	}

	release.Do(func() { close(hooksB.release) })
	until(t, 90*time.Second, "A and B to hold 2 tables each", func() bool {
		return a.ready() && b.ready() && len(hooksA.held()) == 2 && len(hooksB.held()) == 2
	})
	third := mixedEvents("if3", 400, 4)
	e.produceTo(append(third, second[:100]...)...)
	e.waitProcessed(group)
	e.exactlyOnce(append(append(first, second...), third...))
}
