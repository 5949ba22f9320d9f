package processor

import (
	"math"
	"runtime/debug"
	"slices"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/resources"
	"github.com/dedupkit/dedup/internal/tablefile"
)

// Closing every store of the member in Cleanup and opening and restoring
// each claimed partition's store again in Setup, one after the other, would
// stop every partition for as long as the member takes to reopen all of
// them, and a reopened store reads LevelDB until its key filter is rebuilt.
// sarama's eager protocol revokes every partition at each rebalance, so the
// member cannot go on processing through one, but it can keep its stores:
//
//   - Cleanup keeps the stores open (member.kept) once the loop stopped: its
//     last transaction is committed or aborted, so nothing uncommitted is in
//     them. A store LevelDB found damaged is deleted.
//   - Setup closes the kept stores of partitions it did not get, starts one
//     restore per claimed partition (at most restoreParallel at once) and
//     returns. A kept store is not reopened and its key filter not rebuilt.
//   - Every restore, of a kept store too, reads the changelog from the offset
//     the store recorded: the changelog is the truth. Had the partition been
//     another member's meanwhile (this member was cut off, say), the restore
//     reads what that member committed; had nothing moved, there is nothing
//     to read.
//   - A restored partition's table is handed to the loop (member.adopt), and
//     only then do its claims hand the loop records: no record is judged
//     against a partial table, and no offset of a partition still restoring
//     is committed. An event re-keyed to such a partition goes through the
//     loop topic (txnContext.LoopTable does not find its table), so it is
//     judged there once the partition is ready.
//   - A failed restore ends the session, so run rejoins; a disk error stops
//     the member, since rejoining would not fix it.

// restoreParallel bounds the partitions a member restores at once. A restore
// waits on fetches and LevelDB writes in about equal parts, and each one
// holds two restoreWriteBuffer memtables, so a few at once is enough.
const restoreParallel = 4

// restoreBudget is the memory one running restore is given when the Go
// runtime has a memory limit (a container's, see memlimit): its fetch
// responses, memtables, write batches and the garbage they leave. A large
// table restored restoreParallel partitions at a time can outgrow a small
// container's limit, while one at a time fits.
const restoreBudget = 160 << 20

// restoreSlots is how many restores run at once: restoreParallel without a
// memory limit, else as many restoreBudgets as the limit holds, at least one.
func restoreSlots() int {
	limit := debug.SetMemoryLimit(-1) // reads it
	if limit == math.MaxInt64 {
		return restoreParallel
	}
	return max(1, min(restoreParallel, int(limit/restoreBudget)))
}

// bigRestore is the number of records a session's restores read after which
// the restores' heap is returned to the OS.
const bigRestore = 100_000

// partitionRestore is one claimed partition's restore in a session. Its
// goroutine owns the fields until it closes done.
type partitionRestore struct {
	p    int32
	done chan struct{}
	// store is the partition's store: kept or opened, then restored; nil
	// when it was closed after a failure.
	store *store
	// opened: the store was opened at start (preopen.go), not kept.
	opened bool
	ok     bool  // restored and handed to the loop
	n      int64 // changelog records read
	err    error // why the restore ended without ok
}

// Setup starts the session: the loop, and a restore for each claimed
// partition; the partitions' claims wait for theirs (ConsumeClaim).
func (m *member) Setup(sess sarama.ConsumerGroupSession) error {
	m.hooks.Rebalanced()
	if m.bg.peers != nil {
		m.bg.peers.refresh() // the group's members may have changed
	}
	m.session.ready.Store(false)
	m.session.resume.reset(sess.Claims())
	m.bg.holdScans()
	// Uncommitted records of moved partitions are dropped; the others' wait
	// stops while the tables are restored (health.go).
	m.health.restoring(time.Now(), sess.Claims())
	claimed := m.claimedTables(sess.Claims())
	m.session.owned.Store(int32(len(claimed)))
	m.saveClaimed(claimed)
	m.bg.awaitPreopen(sess.Context().Done())
	if m.bg.standby != nil {
		standbys, warmups := m.bg.strategy.Assigned()
		m.bg.standby.reconcile(m, standbys, warmups, claimed)
		m.watchWarmups(sess, warmups)
	}
	m.bg.kept.closeUnclaimed(m, claimed)
	m.tables.mu.Lock()
	m.tables.byPartition = map[int32]*partitionTable{}
	m.tables.mu.Unlock()
	m.tx.state, m.tx.failed, m.tx.committing, m.tx.commitDue = newTxnState(), false, nil, false
	m.session.calls = newCalls(m.topo.Calls(), m.hooks)
	m.tx.resources = resources.New()
	m.tx.handlerCtx = resources.With(sess.Context(), m.tx.resources)
	m.session.in, m.session.stop, m.session.done = make(chan []inbound, 16), make(chan struct{}), make(chan struct{})
	m.session.adopt = make(chan *partitionTable)
	go m.loop(sess)
	m.startRestores(sess, claimed)
	m.log.Info("partitions assigned", "claims", sess.Claims(), "generation", sess.GenerationID())
	return nil
}

// claimedTables is the table partitions of claims: the loop topic's. The
// inputs are claimed with the same partitions (copartitioned), except while
// this member warms up a table another member holds: then it claims that
// partition's inputs without its table and forwards what it would judge
// there (txnContext.Forward), or while another member warms up one of this
// member's tables: then this member keeps the table and loop partition
// without the inputs (internal/assign's input-first plan).
func (m *member) claimedTables(claims map[string][]int32) []int32 {
	return slices.Sorted(slices.Values(claims[m.loopTopic]))
}

// startRestores starts the restores of the claimed partitions and a
// goroutine that, once all ended, marks the member ready. m.restoring counts
// them all; Cleanup waits for them.
func (m *member) startRestores(sess sarama.ConsumerGroupSession, claimed []int32) {
	start := m.session.rebalanceStart
	m.session.rebalanceStart = time.Time{}
	m.session.restores = make(map[int32]*partitionRestore, len(claimed))
	slots := make(chan struct{}, restoreSlots())
	ctx := sess.Context()
	m.session.restoring.Add(len(claimed) + 1)
	for _, p := range claimed {
		r := &partitionRestore{p: p, done: make(chan struct{})}
		r.store, r.opened = m.bg.kept.take(p)
		m.session.restores[p] = r
		go func() {
			defer m.session.restoring.Done()
			defer close(r.done)
			select {
			case slots <- struct{}{}:
				defer func() { <-slots }()
				m.restorePartition(sess, r)
			case <-ctx.Done():
				r.err = ctx.Err()
			}
		}()
	}
	restores := m.session.restores
	go func() {
		defer m.session.restoring.Done()
		var n int64
		ok := true
		for _, r := range restores {
			<-r.done
			n += r.n
			ok = ok && r.ok
		}
		m.health.restored(time.Now())
		if n >= bigRestore {
			// The restores' fetch responses and LevelDB compaction buffers
			// are garbage now, but the runtime would keep the heap they
			// grew for minutes; a worker that restored millions of IDs
			// would hold hundreds of MiB it does not use. Hand it back now,
			// once.
			debug.FreeOSMemory()
		}
		if !ok {
			return
		}
		m.session.resume.restored(time.Now())
		m.session.ready.Store(true)
		if !start.IsZero() {
			m.hooks.RebalanceCompleted(time.Since(start))
		}
		m.log.Info("every claimed partition restored", "partitions", len(restores), "records", n)
	}()
}

// restorePartition brings r's store up to the changelog and hands its table
// to the loop. A kept store is used as it is; otherwise the store is opened
// (a damaged one is deleted and opened empty: store_corrupt.go).
func (m *member) restorePartition(sess sarama.ConsumerGroupSession, r *partitionRestore) {
	ctx := sess.Context()
	if r.store == nil && m.bg.standby != nil {
		r.store = m.bg.standby.take(r.p)
	}
	kept := r.store != nil && !r.opened
	if r.store == nil {
		if !m.bg.kept.awaitClosed(ctx, r.p) {
			r.err = ctx.Err()
			return
		}
		path := tablefile.Path(m.cfg.StateDir, m.topo.TableTopic(), r.p)
		s, damage, err := openOrWipe(path, seenExpiry, m.bg.scans)
		if damage != nil {
			m.log.Error("table store damaged, deleted it to restore it from the changelog",
				"partition", r.p, "path", path, "err", damage)
		}
		if err != nil {
			m.restoreFailed(ctx.Err(), r, err)
			return
		}
		r.store = s
	}
	m.hooks.TableOpened(r.p, kept)
	n, err := m.restore(ctx, r.p, r.store)
	r.n = n
	if err != nil {
		// A store LevelDB found damaged is deleted; one whose restore was
		// cut short (the session ended, a fetch failed) is sound up to the
		// offset it recorded and is kept for the next session.
		r.store.noteCorrupt(err)
		if r.store.corrupt.Load() || diskError(err) {
			m.release(r.p, r.store)
			r.store = nil
		}
		m.restoreFailed(ctx.Err(), r, err)
		return
	}
	select {
	case m.session.adopt <- &partitionTable{m: m, p: r.p, store: r.store}:
		r.ok = true
	case <-ctx.Done():
		r.err = ctx.Err()
	}
}

// restoreFailed ends the session for a failed restore, unless the session
// had ended first (ended: its context's error), which is what failed it. A
// fetch can fail on a broker that moved: the rejoin restores again. A disk
// error stops the member in Cleanup instead.
func (m *member) restoreFailed(ended error, r *partitionRestore, err error) {
	r.err = err
	if ended != nil {
		return
	}
	m.log.Error("restoring table partition failed, ending the session", "partition", r.p, "err", err)
	m.session.cancelSession()
}

// own makes partition t.p's restored table the loop's.
func (ts *tableSet) own(t *partitionTable) {
	ts.mu.Lock()
	ts.byPartition[t.p] = t
	ts.mu.Unlock()
}

// Cleanup waits for the session's restores, commits what the loop holds (on
// revoke and shutdown), stops it and keeps the stores for the next session.
func (m *member) Cleanup(sess sarama.ConsumerGroupSession) error {
	m.session.restoring.Wait()
	m.session.ready.Store(false)
	m.bg.releaseScans()
	m.session.rebalanceStart = time.Now()
	if fenced := sessionFenced(sess.Context(), m.memberName, m.topo.Group); fenced != nil && m.session.fatal == nil {
		// Set before Consume returns, so run never rejoins: a rejoin
		// would fence the newer instance in turn.
		m.log.Error("instance fenced by another with the same instance ID, stopping", "err", fenced)
		m.session.fatal = fenced
	}
	if m.session.stop != nil {
		close(m.session.stop)
		<-m.session.done
		m.session.stop = nil
	}
	m.keepStores()
	return nil
}

// keepStores moves the session's stores to kept, once the loop stopped:
// its transactions are committed or aborted, so the overlays hold nothing
// the next session needs (Drop clears what an apply that failed left). A
// store found damaged is closed and deleted instead, and one whose key
// filter build failed otherwise is closed, so that the next session opens it
// and builds the filter again instead of failing on it. A restore that failed
// on the disk stops the member: a full disk or a read-only state dir needs
// an operator, and rejoining every second until then would rebalance every
// member of the group each time.
func (m *member) keepStores() {
	m.tables.mu.Lock()
	tables := m.tables.byPartition
	m.tables.byPartition = nil
	m.tables.mu.Unlock()
	for p, r := range m.session.restores {
		if r.err != nil && diskError(r.err) && m.session.fatal == nil {
			m.session.fatal = r.err
		}
		s := r.store
		if t := tables[p]; t != nil {
			s = t.store
		}
		if s == nil {
			continue
		}
		s.Drop()
		if s.corrupt.Load() || s.keysErr() != nil {
			m.release(p, s)
			continue
		}
		m.bg.kept.put(m, p, s)
	}
	m.session.restores = nil
}

// closeKept closes the stores the member kept, when run returns.
func (m *member) closeKept() {
	m.bg.awaitPreopen(nil) // its stores are m's to close too
	if m.bg.kept != nil {
		m.bg.kept.closeUnclaimed(m, nil)
		m.bg.kept.waitClosed()
	}
}

// release closes partition p's store, which the next owner may open, and
// tells the hooks the partition is not this member's any more.
func (m *member) release(p int32, s *store) {
	m.closeStore(p, s)
	m.hooks.PartitionRevoked(p)
}

// closeStore closes a partition's store and deletes it when LevelDB found it
// damaged, so that the next owner restores it from the changelog
// (store_corrupt.go).
func (m *member) closeStore(p int32, s *store) {
	wiped, err := s.closeOrWipe()
	if wiped {
		m.log.Error("table store damaged, deleted it: the partition's next owner restores it from the changelog",
			"partition", p, "path", s.path)
	}
	if err != nil {
		m.log.Warn("closing table store", "partition", p, "err", err)
	}
}
