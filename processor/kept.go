package processor

import (
	"context"
	"slices"
	"sync"
)

// keptStores are the stores the members of one Processor kept open from
// their last sessions. A member takes a partition's store whichever member
// kept it: with several threads, the partition another thread held may be
// this one's now, and LevelDB would refuse to open it while it is open. A
// member closes those it kept and did not claim again in its Setup, in the
// background (closeLater), and every open of a partition's store first
// waits for its close (awaitClosed). (A member whose session timed out
// while it still holds a store in its loop has not kept it yet: another
// member's open fails on LevelDB's lock, and the rejoin retries.)
type keptStores struct {
	mu     sync.Mutex
	stores map[int32]keptStore
	// closing: by partition, the closes closeLater runs that have not
	// ended (a later close of a partition ends only after the earlier).
	closing map[int32]chan struct{}
}

type keptStore struct {
	s  *store
	by *member
	// opened: opened at start for the partitions by noted (preopen.go),
	// not kept from a session of by's.
	opened bool
}

// take removes and returns partition p's kept store, nil when none, and
// whether it was opened at start rather than kept from a session.
func (k *keptStores) take(p int32) (s *store, opened bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	ks, ok := k.stores[p]
	if !ok {
		return nil, false
	}
	delete(k.stores, p)
	return ks.s, ks.opened
}

// put keeps partition p's store, kept by m.
func (k *keptStores) put(m *member, p int32, s *store) { k.keep(p, keptStore{s: s, by: m}) }

// putOpened keeps partition p's store, opened at start for m.
func (k *keptStores) putOpened(m *member, p int32, s *store) {
	k.keep(p, keptStore{s: s, by: m, opened: true})
}

func (k *keptStores) keep(p int32, ks keptStore) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stores == nil {
		k.stores = map[int32]keptStore{}
	}
	k.stores[p] = ks
}

// closeUnclaimed closes the stores m kept whose partitions are not in
// claimed, in the background.
func (k *keptStores) closeUnclaimed(m *member, claimed []int32) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for p, ks := range k.stores {
		if ks.by == m && !slices.Contains(claimed, p) {
			delete(k.stores, p)
			k.closeLaterLocked(p, func() { m.release(p, ks.s) })
		}
	}
}

// closeLater runs work, which closes partition p's store, in a goroutine:
// Setup runs while the group waits, and closing a LevelDB store, or first
// stopping the standby that has it open, can take a second.
func (k *keptStores) closeLater(p int32, work func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closeLaterLocked(p, work)
}

func (k *keptStores) closeLaterLocked(p int32, work func()) {
	if k.closing == nil {
		k.closing = map[int32]chan struct{}{}
	}
	prev := k.closing[p] // an earlier close of p; it counts as done only after it
	done := make(chan struct{})
	k.closing[p] = done
	go func() {
		work()
		if prev != nil {
			<-prev
		}
		k.mu.Lock()
		if k.closing[p] == done {
			delete(k.closing, p)
		}
		k.mu.Unlock()
		close(done)
	}()
}

// awaitClosed waits until no close of partition p's store is running, so
// that it can be opened; false when ctx ended first.
func (k *keptStores) awaitClosed(ctx context.Context, p int32) bool {
	if k == nil {
		return true
	}
	k.mu.Lock()
	done := k.closing[p]
	k.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// waitClosed waits until no close closeLater started is running. Another
// member of the Processor may start closes meanwhile (a WaitGroup's Wait
// must not race its Add), so it waits for what is running until nothing is.
func (k *keptStores) waitClosed() {
	for {
		k.mu.Lock()
		running := make([]chan struct{}, 0, len(k.closing))
		for _, done := range k.closing {
			running = append(running, done)
		}
		k.mu.Unlock()
		if len(running) == 0 {
			return
		}
		for _, done := range running {
			<-done
		}
	}
}
