package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/dedupkit/dedup/processor"
)

// restoreHooks counts the changelog records the member's restores read
// (standbys report none: only a takeover's restore does).
type restoreHooks struct {
	openHooks
	restored int64
}

func (h *restoreHooks) RestoreProgress(p int32, records, remaining int64) {
	h.mu.Lock()
	h.restored += records
	h.mu.Unlock()
	h.openHooks.RestoreProgress(p, records, remaining)
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
			a := e.startEOS(e.topology(group, &counter{}), processor.Config{StateDir: t.TempDir(), Hooks: hooksA,
				StandbyReplicas: tc.replicas, LeaveGroupOnStop: true})
			until(t, 60*time.Second, "A to hold every partition", func() bool { return a.ready() && len(hooksA.held()) == 4 })
			first := events("sb1", 2000) // about 500 seen IDs per partition's changelog
			e.produce(first...)
			e.waitProcessed(group)

			hooksB := &restoreHooks{}
			b := e.startEOS(e.topology(group, &counter{}), processor.Config{StateDir: t.TempDir(), Hooks: hooksB,
				StandbyReplicas: tc.replicas})
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
