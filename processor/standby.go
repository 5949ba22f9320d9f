package processor

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/kafkautil"
	"github.com/dedupkit/dedup/internal/tablefile"
)

// Standby replicas (Config.Group.StandbyReplicas) are copies of other members'
// table partitions, kept up to date by tailing their changelogs. Without
// them a partition that changes owner is restored from the whole changelog
// before it processes again, which takes long for a large table (restore
// times: docs/benchmarks-failover.md). With them:
//
//   - the group's leader places the standbys (internal/assign): never on
//     the owner's process, first where a copy is already, then where
//     there are fewest; a partition whose owner left goes to a member whose
//     standby has caught up, which restores only the tail;
//   - a partition that must move from a live member (one joined) stays
//     with it until the new owner's warm-up standby has caught up: the new
//     owner then joins again (watchWarmups), its subscription saying so,
//     and the leader moves the partition in that rebalance;
//   - a member keeps the store of a partition it loses as that partition's
//     standby when the plan says so, and a standby's store becomes the
//     owner's store without being closed (standbyTasks.take).
//
// A standby reads read_committed up to the last stable offset, so it holds
// only committed records, as an owner's store does: the takeover's restore
// starts at the offset it recorded, as after a restart.

// MaxStandbyReplicas bounds Config.Group.StandbyReplicas: each copy costs an
// instance the disk and about the memory of an owned partition.
const MaxStandbyReplicas = 3

const (
	// acceptableLag is how far behind its changelog a standby may be and
	// count as caught up: a takeover then reads at most that many records
	// (a tenth of a second here). Kafka Streams' acceptable.recovery.lag
	// has the same default.
	acceptableLag = 10_000
	// tailInterval is how often a caught-up standby looks for new records.
	tailInterval = 250 * time.Millisecond
	// probeInterval is the least time between two warm-up rejoins of one
	// member, should the leader not move the caught-up partitions.
	probeInterval = 10 * time.Second
)

// standbyTasks are the standbys of one Processor's members, by partition.
// A member's Setup reconciles its own with its assignment; a restore takes
// the store of a standby whose partition the member now owns.
type standbyTasks struct {
	mu    sync.Mutex
	tasks map[int32]*standbyTask
	// bulk lets one standby at a time read more than acceptableLag
	// records (a new standby, or one that fell behind); warm lets the
	// warm-ups of a member that owns no partition read theirs side by
	// side, as many as restores may run at once. See bulkSlot.
	bulk chan struct{}
	warm chan struct{}
}

func newStandbyTasks() *standbyTasks {
	return &standbyTasks{tasks: map[int32]*standbyTask{},
		bulk: make(chan struct{}, 1), warm: make(chan struct{}, restoreSlots())}
}

// standbyTask tails one partition's changelog into its store.
type standbyTask struct {
	p      int32
	by     *member // whose assignment holds it
	cancel context.CancelFunc
	done   chan struct{}
	// store is the task goroutine's until done is closed, then the
	// stopper's; nil when it could not be opened.
	store *store
	// lag is how far behind the last stable offset the store was at the
	// start of the latest catch-up; -1 before the first.
	lag atomic.Int64
	// warmup: its partition moves to its member once it caught up
	// (watchWarmups). Guarded by standbyTasks.mu.
	warmup bool
}

// held is what m reports in its subscription: its standbys and those
// caught up.
func (st *standbyTasks) held(m *member) (standbys, caughtUp []int32) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for p, t := range st.tasks {
		if t.by != m {
			continue
		}
		standbys = append(standbys, p)
		if l := t.lag.Load(); l >= 0 && l <= acceptableLag {
			caughtUp = append(caughtUp, p)
		}
	}
	slices.Sort(standbys)
	slices.Sort(caughtUp)
	return standbys, caughtUp
}

// caughtUp reports whether every partition of ps has a caught-up standby.
func (st *standbyTasks) caughtUp(ps []int32) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, p := range ps {
		t := st.tasks[p]
		if t == nil {
			return false
		}
		if l := t.lag.Load(); l < 0 || l > acceptableLag {
			return false
		}
	}
	return true
}

// reconcile makes m's standbys those of want, the warmups among them
// first in line for a bulk read (awaitWarmups). It runs in Setup, while the
// group waits for the member's partitions, so it waits for no standby: one
// m no longer holds is stopped and its store closed in the background (a
// standby that is opening its store, catching up or waiting on a fetch can
// take a second to stop). A standby of a partition m now owns (claimed)
// is left for the partition's restore to take, store and all (take). A new
// standby starts from the store m kept of a partition it owned, else from
// disk.
func (st *standbyTasks) reconcile(m *member, want, warmups, claimed []int32) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for p, t := range st.tasks {
		if t.by == m && !slices.Contains(want, p) && !slices.Contains(claimed, p) {
			delete(st.tasks, p)
			st.stopLocked(m, t)
		}
	}
	for _, p := range want {
		if slices.Contains(claimed, p) {
			continue // stale: the leader puts no standby where it puts the partition
		}
		warmup := slices.Contains(warmups, p)
		if t := st.tasks[p]; t != nil {
			t.by, t.warmup = m, warmup // another member of this process held it
			continue
		}
		kept, opened := m.bg.kept.take(p)
		if kept != nil && !opened {
			// Its owner until now: the partition is not its own any more.
			m.hooks.PartitionRevoked(p)
		}
		ctx, cancel := context.WithCancel(context.Background())
		t := &standbyTask{p: p, by: m, cancel: cancel, done: make(chan struct{}), store: kept, warmup: warmup}
		t.lag.Store(-1)
		st.tasks[p] = t
		go m.tail(ctx, t)
	}
}

// stopLocked stops standby t, which is no longer in st.tasks, and closes
// its store once its goroutine ended, in the background (keptStores.closeLater);
// st.mu is held.
func (st *standbyTasks) stopLocked(m *member, t *standbyTask) {
	t.cancel()
	m.bg.kept.closeLater(t.p, func() {
		<-t.done
		if t.store != nil {
			m.closeStore(t.p, t.store)
		}
		st.mu.Lock()
		if st.tasks[t.p] == nil { // else a new standby of t.p reports its own lag
			m.hooks.StandbyLag(t.p, -1)
		}
		st.mu.Unlock()
	})
}

// take stops partition p's standby and returns its store for the member
// that now owns p; nil when there is none.
func (st *standbyTasks) take(p int32) *store {
	st.mu.Lock()
	t := st.tasks[p]
	delete(st.tasks, p)
	var by *member
	if t != nil {
		by = t.by
	}
	st.mu.Unlock()
	if t == nil {
		return nil
	}
	t.cancel()
	<-t.done
	by.hooks.StandbyLag(p, -1)
	return t.store
}

// closeAll stops m's standbys and waits until their stores are closed,
// when m stops.
func (st *standbyTasks) closeAll(m *member) {
	st.reconcile(m, nil, nil, nil)
	m.bg.kept.waitClosed()
}

// tail opens (unless kept) and follows partition t.p's changelog until
// ctx ends. A failure is retried after a second; a store found damaged is
// deleted and started again.
func (m *member) tail(ctx context.Context, t *standbyTask) {
	defer close(t.done)
	caughtUp := false
	for ctx.Err() == nil {
		if t.store == nil {
			// Opening a standby's store and building its key filter while
			// the member restores its own partitions would lengthen their
			// pause, so a standby opened from disk waits until the member's
			// own partitions process again.
			if !m.awaitLive(ctx) || !m.bg.kept.awaitClosed(ctx, t.p) {
				return
			}
			path := tablefile.Path(m.cfg.StateDir, m.tableTopic, t.p)
			s, damage, err := openOrWipe(path, seenExpiry, m.bg.scans)
			if damage != nil {
				m.log.Error("standby table store damaged, deleted it to restore it from the changelog",
					"partition", t.p, "path", path, "err", damage)
			}
			if err != nil {
				m.log.Warn("opening standby table store failed, retrying", "partition", t.p, "err", err)
				sleep(ctx, time.Second)
				continue
			}
			t.store = s
		}
		lag, n, err := m.catchUp(ctx, t.p, t.store)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			t.store.noteCorrupt(err)
			if t.store.corrupt.Load() || t.store.keysErr() != nil {
				// Damaged (closeStore deletes it), or its key filter
				// build failed, which fails every read of the store:
				// open it again.
				m.closeStore(t.p, t.store)
				t.store = nil
			}
			m.log.Warn("standby of a table partition failed, retrying", "partition", t.p, "err", err)
			sleep(ctx, time.Second)
			continue
		}
		t.lag.Store(lag)
		m.hooks.StandbyLag(t.p, lag)
		if !caughtUp && lag <= acceptableLag {
			caughtUp = true
			m.log.Info("standby caught up", "partition", t.p, "entries", t.store.entries, "records", n)
		}
		if lag <= acceptableLag {
			sleep(ctx, tailInterval)
		}
	}
}

// awaitLive waits until every partition m claimed is restored (m.ready)
// and processes again (it no longer holds the key filter builds,
// scanpace.go, resume.go); false when ctx ended first.
func (m *member) awaitLive(ctx context.Context) bool {
	for !m.session.ready.Load() || m.bg.holdingScans.Load() {
		if !sleep(ctx, heldPoll) {
			return false
		}
	}
	return true
}

// catchUp applies partition p's committed changelog records from the
// offset s recorded up to the last stable offset, and returns how far
// behind that was (lag) and the records read. A stored offset below the
// log start (deleted by retention or by hand) restarts from the start.
func (m *member) catchUp(ctx context.Context, p int32, s *store) (lag, n int64, err error) {
	start, lso, err := kafkautil.Bounds(m.client, m.tableTopic, p)
	if err != nil {
		return 0, 0, err
	}
	from, err := s.ChangelogNext()
	if err != nil {
		return 0, 0, err
	}
	if from < 0 {
		from = start
	}
	if from < start {
		if err := s.Wipe(); err != nil {
			return 0, 0, err
		}
		from = start
	}
	if from >= lso {
		return 0, 0, nil
	}
	lag = lso - from
	m.hooks.StandbyLag(p, lag) // before it waits for its turn below
	if lag <= acceptableLag {
		n, err = m.readChangelog(ctx, p, s, from, lso, nil)
		return lag, n, err
	}
	// A bulk read competes for the CPU with processing: a worker that
	// lost a peer gets new standbys, and its partitions, the ones it has
	// just taken over too, would stall while all of them read at once.
	// So, while the member owns partitions, one bulk read at a time per
	// process and a rest after each chunk as long as the chunk took: at
	// most half a core.
	// A member warming up with nothing to process reads at full speed.
	if !m.bg.standby.awaitWarmups(ctx, p) {
		return 0, 0, ctx.Err()
	}
	release, ok := m.bg.standby.bulkSlot(ctx, p, m.session.owned.Load() == 0)
	if !ok {
		return 0, 0, ctx.Err()
	}
	defer release()
	last := time.Now()
	n, err = m.readChangelog(ctx, p, s, from, lso, func(int64, int64) {
		if m.session.owned.Load() > 0 {
			sleep(ctx, time.Since(last))
		}
		last = time.Now()
	})
	return lag, n, err
}

// bulkSlot waits for p's standby's turn to read a backlog and returns
// what ends it; false when ctx ended first. A warm-up standby of a member
// that owns no partition (idle: it joined and waits for them) reads beside
// the other warm-ups, as a takeover's restores do: nothing of the member
// waits on its CPU, and the join hands the partitions over only once the
// last warm-up caught up, so one after another would make a join wait for
// the sum of them. Side by side they use the CPU a restore alone leaves idle
// while it waits on fetches and writes (on a saturated machine the CPU
// bounds both). Any other bulk read takes the process's one bulk slot.
func (st *standbyTasks) bulkSlot(ctx context.Context, p int32, idle bool) (release func(), ok bool) {
	st.mu.Lock()
	t := st.tasks[p]
	slots := st.bulk
	if idle && t != nil && t.warmup {
		slots = st.warm
	}
	st.mu.Unlock()
	select {
	case slots <- struct{}{}:
		return func() { <-slots }, true
	case <-ctx.Done():
		return nil, false
	}
}

// awaitWarmups makes the bulk read of partition p's standby wait, unless
// it is a warm-up, until every warm-up standby of the process caught up:
// a joining worker takes its share only once its warm-ups did, and its
// other standbys read first, in any order, would make the join wait for
// them too. False when ctx ended.
func (st *standbyTasks) awaitWarmups(ctx context.Context, p int32) bool {
	for st.waitsForWarmups(p) {
		if !sleep(ctx, heldPoll) {
			return false
		}
	}
	return true
}

// waitsForWarmups reports whether p's standby is not a warm-up while a
// warm-up standby has not caught up yet.
func (st *standbyTasks) waitsForWarmups(p int32) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if t := st.tasks[p]; t == nil || t.warmup {
		return false
	}
	for _, t := range st.tasks {
		if l := t.lag.Load(); t.warmup && (l < 0 || l > acceptableLag) {
			return true
		}
	}
	return false
}

// watchWarmups rejoins the group once every warm-up standby of the session
// has caught up, so that the leader moves those partitions here (see the
// top of this file). It belongs to the session, like the restores.
func (m *member) watchWarmups(sess sarama.ConsumerGroupSession, warmups []int32) {
	if len(warmups) == 0 {
		return
	}
	rejoin := m.session.cancelSession
	m.session.restoring.Add(1)
	go func() {
		defer m.session.restoring.Done()
		tick := time.NewTicker(tailInterval)
		defer tick.Stop()
		for {
			select {
			case <-sess.Context().Done():
				return
			case <-tick.C:
			}
			if !m.bg.standby.caughtUp(warmups) || time.Since(time.Unix(0, m.bg.lastProbe.Load())) < probeInterval {
				continue
			}
			m.bg.lastProbe.Store(time.Now().UnixNano())
			m.log.Info("warm-up standbys caught up: rejoining so that the group's leader hands them over", "partitions", warmups)
			rejoin()
			return
		}
	}()
}
