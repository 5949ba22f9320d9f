package integration

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dedupkit/dedup/internal/netfault"
	"github.com/dedupkit/dedup/processor"
)

// openHooks records each table a session starts with, and whether the member
// kept it from its previous session; the table sizes through tableHooks.
type openHooks struct {
	tableHooks
	opens []tableOpen
	// block, when set, holds partition blocked's restore at its end until
	// it is closed.
	blocked int32
	block   chan struct{}
	// barrier, when not 0, holds every restore at its end until that many
	// tables were opened, or a minute passed: restores that run one after
	// the other never get past it together.
	barrier int
	reached chan struct{}
	waited  bool // a restore gave up waiting for the barrier
}

type tableOpen struct {
	p    int32
	kept bool
}

func (h *openHooks) OnTableOpened(p int32, kept bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.opens = append(h.opens, tableOpen{p, kept})
	if h.barrier > 0 && len(h.opens) == h.barrier {
		close(h.reached)
	}
}

func (h *openHooks) OnRestoreProgress(p int32, _, remaining int64) {
	if remaining > 0 {
		return
	}
	if h.reached != nil {
		select {
		case <-h.reached:
		case <-time.After(time.Minute):
			h.mu.Lock()
			h.waited = true
			h.mu.Unlock()
		}
	}
	if h.block != nil && p == h.blocked {
		<-h.block
	}
}

// since is the tables opened after the first n.
func (h *openHooks) since(n int) []tableOpen {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.opens[min(n, len(h.opens)):])
}

func (h *openHooks) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.opens)
}

// TestRebalanceKeepsTheStoresOfClaimedPartitions: when a second worker joins,
// the first keeps the stores of the partitions it is assigned again, open,
// instead of closing them and opening them again (a scan of every stored
// key); the partitions it hands over are restored by the newcomer. Copies of
// the events processed before come out nowhere.
func TestRebalanceKeepsTheStoresOfClaimedPartitions(t *testing.T) {
	e := newEnv(t, 4)
	group := e.group("keep")
	hooksA := &openHooks{}
	a := e.startEOS(e.topology(group, &counter{}), processor.Config{StateDir: t.TempDir(), Hooks: []processor.Hook{hooksA}})
	until(t, 60*time.Second, "A to restore its 4 partitions", func() bool { return a.ready() && hooksA.count() == 4 })
	for _, o := range hooksA.since(0) {
		if o.kept {
			t.Fatalf("A's first session kept partition %d: it had nothing to keep", o.p)
		}
	}
	first := events("k1", 60)
	e.produce(first...)
	e.waitProcessed(group)

	hooksB := &openHooks{}
	b := e.startEOS(e.topology(group, &counter{}), processor.Config{StateDir: t.TempDir(), Hooks: []processor.Hook{hooksB}})
	until(t, 60*time.Second, "A and B to share the partitions", func() bool {
		return a.ready() && b.ready() && len(hooksA.held())+len(hooksB.held()) == 4 && len(hooksB.held()) > 0
	})
	after := hooksA.since(4)
	if len(after) == 0 {
		t.Fatal("A started no session after B joined")
	}
	for _, o := range after {
		if !o.kept {
			t.Errorf("A opened partition %d's store again after B joined; want the store it kept", o.p)
		}
	}
	second := events("k2", 60)
	e.produce(append(second, first...)...)
	e.waitProcessed(group)
	e.exactlyOnce(append(first, second...))
	t.Logf("A's tables after B joined: %v; B's: %v", after, hooksB.since(0))
}

// TestKeptStoreReadsTheTailAnotherMemberWrote: a worker cut off from the
// brokers keeps its stores while another takes its partitions and commits
// events there. When the first gets them back, its kept stores read what the
// other wrote to the changelog meanwhile, so copies of those events are
// recognised.
func TestKeptStoreReadsTheTailAnotherMemberWrote(t *testing.T) {
	routes := proxyRoutes(t)
	e := newEnv(t, 4)
	px, err := netfault.Start(routes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	group := e.group("keep-tail")
	hooksA := &openHooks{}
	a := e.startEOS(e.topology(group, &counter{}), processor.Config{StateDir: t.TempDir(), Hooks: []processor.Hook{hooksA},
		Brokers: strings.Split(px.Addrs(), ",")})
	until(t, 60*time.Second, "A to restore its 4 partitions", func() bool { return a.ready() && hooksA.count() == 4 })
	first := events("tail1", 40)
	e.produce(first...)
	e.waitProcessed(group)

	// A is cut off; B takes every partition once A's session timed out and
	// commits new events there, changelog records A's stores do not have.
	px.Reset()
	hooksB := &openHooks{}
	b := e.startEOS(e.topology(group, &counter{}), processor.Config{StateDir: t.TempDir(), Hooks: []processor.Hook{hooksB}})
	until(t, 60*time.Second, "B to hold every partition", func() bool { return b.ready() && len(hooksB.held()) == 4 })
	second := events("tail2", 40)
	e.produce(second...)
	e.waitProcessed(group)
	b.stop(t)

	opened := hooksA.count()
	px.Heal()
	until(t, 90*time.Second, "A to get partitions back with a kept store", func() bool {
		return slices.ContainsFunc(hooksA.since(opened), func(o tableOpen) bool { return o.kept })
	})
	until(t, 60*time.Second, "A to hold every partition again", func() bool { return a.ready() && len(hooksA.held()) == 4 })
	e.produce(append(second, first...)...)
	e.waitProcessed(group)
	e.exactlyOnce(append(first, second...))
	t.Logf("A's tables after it came back: %v", hooksA.since(opened))
}

// partitionCounter counts processed events by table partition.
type partitionCounter struct {
	counter
	byPartition map[int32]int
}

func (c *partitionCounter) OnProcessed(p int32, d time.Duration) {
	c.counter.OnProcessed(p, d)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byPartition == nil {
		c.byPartition = map[int32]int{}
	}
	c.byPartition[p]++
}

func (c *partitionCounter) processedOn(p int32) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byPartition[p]
}

// TestRestoresRunInParallelAndPartitionsProcessOnceRestored: a member's
// claimed partitions restore at once, and each processes as soon as its own
// restore ended. While partition 0's restore is held, the others process;
// nothing is judged in partition 0's table (events re-keyed there wait in
// the loop topic) and the worker is not ready.
func TestRestoresRunInParallelAndPartitionsProcessOnceRestored(t *testing.T) {
	e := newEnv(t, 4)
	group := e.group("parallel")
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open) // before the worker stops: its Cleanup waits for the restore
	hooks := &openHooks{block: release, blocked: 0, barrier: 4, reached: make(chan struct{})}
	obs := &partitionCounter{}
	w := e.startEOS(e.topology(group, obs), processor.Config{StateDir: t.TempDir(), Hooks: []processor.Hook{hooks}})
	all := events("par", 80)
	e.produce(all...)
	until(t, 60*time.Second, "events of the restored partitions to be processed while partition 0 restores", func() bool {
		processed, _ := obs.counts()
		return processed > 0
	})
	if n := obs.processedOn(0); n > 0 {
		t.Errorf("%d events judged in partition 0 while its restore was held", n)
	}
	if w.ready() {
		t.Error("the worker is ready while partition 0 restores")
	}
	hooks.mu.Lock()
	waited := hooks.waited
	hooks.mu.Unlock()
	if waited {
		t.Error("the 4 restores did not run at once: one waited a minute for the others to start")
	}
	open()
	until(t, 60*time.Second, "the worker to be ready", w.ready)
	e.waitProcessed(group)
	e.exactlyOnce(all)
	if obs.processedOn(0) == 0 {
		t.Error("nothing judged in partition 0 once restored; pick events that hash there")
	}
}
