package processor

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/tablefile"
)

// reconcile runs in Setup while the group waits: it must not wait for a
// standby to stop. An open of the stopped standby's partition waits until
// its store is closed, and a standby of a partition the member now owns is
// left for the restore to take.
func TestReconcileStopsStandbysWithoutWaiting(t *testing.T) {
	state := t.TempDir()
	topo := &dedup.Topology{Group: "g"}
	m := &member{cfg: &Config{StateDir: state}, topo: topo, tableTopic: topo.TableTopic(), bg: background{kept: &keptStores{}},
		hooks: nil, log: slog.New(slog.DiscardHandler)}
	st := newStandbyTasks()
	m.bg.standby = st
	task := func(p int32) *standbyTask {
		s, err := openStore(tablefile.Path(state, topo.TableTopic(), p), seenExpiry, nil)
		if err != nil {
			t.Fatal(err)
		}
		s.stopRebuild()
		_, cancel := context.WithCancel(context.Background())
		t := &standbyTask{p: p, by: m, cancel: cancel, done: make(chan struct{}), store: s}
		st.tasks[p] = t
		return t
	}
	stopped, owned := task(1), task(2) // neither goroutine ends until the test says so

	reconciled := make(chan struct{})
	go func() {
		st.reconcile(m, nil, nil, []int32{2})
		close(reconciled)
	}()
	select {
	case <-reconciled:
	case <-time.After(5 * time.Second):
		t.Fatal("reconcile waited for a standby to stop")
	}
	if st.tasks[1] != nil || st.tasks[2] != owned {
		t.Fatalf("tasks after reconcile: %v; want partition 1 stopped and 2 left for its restore", st.tasks)
	}

	opened := make(chan bool)
	go func() { opened <- m.bg.kept.awaitClosed(context.Background(), 1) }()
	select {
	case <-opened:
		t.Fatal("an open of partition 1 went ahead while its stopped standby still held the store")
	case <-time.After(50 * time.Millisecond):
	}
	close(stopped.done) // the standby's goroutine ends; its store is closed next
	if !<-opened {
		t.Fatal("awaitClosed: false without a cancelled context")
	}
	s, err := openStore(tablefile.Path(state, topo.TableTopic(), 1), seenExpiry, nil)
	if err != nil {
		t.Fatalf("partition 1's store is still open after awaitClosed: %v", err)
	}
	s.Close()

	close(owned.done)
	if got := st.take(2); got != owned.store {
		t.Fatalf("take(2) = %p, want the standby's store %p", got, owned.store)
	}
	owned.store.Close()
	st.closeAll(m)
	if len(m.bg.kept.closing) != 0 {
		t.Fatalf("closes running after closeAll: %v", m.bg.kept.closing)
	}
}

// A close of a partition's store counts as done only once every earlier
// close of that partition ended: the later one may concern a standby that
// never opened the store because the earlier close still held it.
func TestCloseLaterChainsClosesOfOnePartition(t *testing.T) {
	k := &keptStores{}
	first, second := make(chan struct{}), make(chan struct{})
	k.closeLater(3, func() { <-first })
	k.closeLater(3, func() { close(second) })
	<-second // the second close's work ended

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if k.awaitClosed(ctx, 3) {
		t.Fatal("partition 3 counted as closed while its first close still ran")
	}
	if !k.awaitClosed(context.Background(), 4) {
		t.Fatal("partition 4, never closed, must not wait")
	}
	close(first)
	if !k.awaitClosed(context.Background(), 3) {
		t.Fatal("awaitClosed: false without a cancelled context")
	}
	k.waitClosed()
	if len(k.closing) != 0 {
		t.Fatalf("closes left after waitClosed: %v", k.closing)
	}
}

// A standby that is not a warm-up reads its backlog only once every
// warm-up standby caught up: the join hands the partitions over only then.
func TestStandbysWaitForTheWarmups(t *testing.T) {
	st := newStandbyTasks()
	add := func(p int32, warmup bool) *standbyTask {
		t := &standbyTask{p: p, done: make(chan struct{}), warmup: warmup}
		t.lag.Store(-1)
		st.tasks[p] = t
		return t
	}
	warm, _ := add(1, true), add(2, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	if !st.awaitWarmups(ctx, 1) {
		t.Fatal("a warm-up standby waited for the warm-ups")
	}
	other := make(chan bool)
	go func() { other <- st.awaitWarmups(ctx, 2) }()
	select {
	case <-other:
		t.Fatal("a standby read its backlog before the warm-up caught up")
	case <-time.After(100 * time.Millisecond):
	}
	warm.lag.Store(acceptableLag + 1) // read once, still behind
	select {
	case <-other:
		t.Fatal("a standby read its backlog while the warm-up was still behind")
	case <-time.After(100 * time.Millisecond):
	}
	warm.lag.Store(acceptableLag)
	if !<-other {
		t.Fatal("awaitWarmups: false without a cancelled context")
	}

	warm.lag.Store(-1)
	go func() { other <- st.awaitWarmups(ctx, 2) }()
	cancel()
	if <-other {
		t.Fatal("awaitWarmups: true after its context ended")
	}
}

// Every member of a Processor waits for the kept stores' closes when its
// run ends, while another member may still start closes: the wait must not
// race them, and it returns only once none runs.
func TestKeptWaitClosedWhileOthersClose(t *testing.T) {
	k := &keptStores{}
	const closes = 3000
	var ran atomic.Int64
	finished := make(chan struct{})
	go func() { // the other member, closing while this one waits
		defer close(finished)
		for i := 0; i < closes; i++ {
			k.closeLater(int32(i%4), func() { ran.Add(1) })
			if i%16 == 0 {
				k.awaitClosed(context.Background(), int32(i%4))
			}
		}
	}()
	for waiting := true; waiting; {
		select {
		case <-finished:
			waiting = false
		default:
		}
		k.waitClosed()
	}
	k.mu.Lock()
	left := len(k.closing)
	k.mu.Unlock()
	if left != 0 || ran.Load() != closes {
		t.Fatalf("%d closes running after waitClosed, %d of %d ran", left, ran.Load(), closes)
	}
}

// The warm-ups of a member that owns no partition read their backlogs side
// by side, as many as restores may run at once; every other backlog read,
// a warm-up's of a member that processes too, waits for the one bulk slot.
func TestBulkSlots(t *testing.T) {
	st := newStandbyTasks()
	st.warm = make(chan struct{}, 2) // restoreSlots() depends on the memory limit
	for p, warmup := range map[int32]bool{1: true, 2: true, 3: true, 4: false} {
		t := &standbyTask{p: p, done: make(chan struct{}), warmup: warmup}
		t.lag.Store(-1)
		st.tasks[p] = t
	}
	ctx := context.Background()
	take := func(p int32, idle bool) func() {
		t.Helper()
		waited, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		release, ok := st.bulkSlot(waited, p, idle)
		if !ok {
			t.Fatalf("bulkSlot(%d, idle %v): no free slot", p, idle)
		}
		return release
	}
	// waits reports whether bulkSlot(p, idle) is still waiting after a
	// while; the slot it gets later is released.
	waits := func(p int32, idle bool, release func()) bool {
		t.Helper()
		got := make(chan func(), 1)
		go func() { r, _ := st.bulkSlot(ctx, p, idle); got <- r }()
		select {
		case r := <-got:
			r()
			return false
		case <-time.After(100 * time.Millisecond):
		}
		release()
		(<-got)()
		return true
	}

	r1, r2 := take(1, true), take(2, true)
	if !waits(3, true, r2) {
		t.Fatal("a third idle warm-up read beside two with two slots")
	}
	bulk := take(4, true) // not a warm-up: the bulk slot, free beside the warm-ups
	if !waits(3, false, bulk) {
		t.Fatal("a warm-up of a member that owns partitions did not wait for the bulk slot")
	}
	r1()

	ended, cancel := context.WithCancel(ctx)
	cancel()
	hold := take(4, false)
	defer hold()
	if _, ok := st.bulkSlot(ended, 4, false); ok {
		t.Fatal("bulkSlot: a slot after its context ended")
	}
}
