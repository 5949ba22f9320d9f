package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/kafkautil"
)

// An instance killed with a transaction open (kill -9, a lost node) holds
// more than its own partitions. Under re-keying every member's transaction
// writes to most partitions of <group>-loop, which every member reads
// committed-only, so the dead transaction pins the last stable offset of
// partitions that live members own: they stop until it ends. The group's
// leader fences it once the dead instance left the group (fence.go), but
// that is a session timeout after the kill; the broker's own expiry is later
// still. For the whole group that was a stall of the session timeout after
// every kill -9.
//
// Kafka tells no member of another's death before the session timeout. What
// a member can see is a transaction that does not end: a live member ends
// its transaction every commit interval, however long its handler's calls
// take (calls.go). So a member whose loop partition stops
// advancing while records wait beyond it looks at the group's open
// transactions (ListTransactions, DescribeTransactions, Kafka 3.0+) and
// fences every one of another instance that it has watched stay open,
// unchanged, for Config.Transactions.FenceStuckAfter: an InitProducerId on its
// transactional ID makes the coordinator abort it, the same abort as the
// leader's (abort.go). Nothing is lost or doubled either way: a fenced live
// member finds its transaction aborted and starts over from its committed
// offsets, as after any fencing. A transactional ID fenced here is not
// fenced here again for stuckRefence: a live member whose transactions take
// longer than the bound then loses at most one transaction in that time,
// and the warning says to raise the bound.
//
// A transaction's age has two lower bounds, and it is fenced once either
// reaches the bound. One is this member's clock since its first sight of
// the transaction (same producer ID, epoch and start time). The other is
// the coordinator's own clock: the newest start time among the group's
// open transactions that coordinator describes (a live member's is at most
// a commit interval old) minus the transaction's start time. Each compares
// one clock with itself, so no skew between this host and the brokers can
// make a young transaction look old; only a transaction begun under
// another coordinator (the coordinator moved since) mixes two brokers'
// clocks, by their skew. A fencing in error costs a live member one
// transaction, never an event. The first bound alone would add the watch's
// detection (up to two polls) to the bound after a kill -9; the second
// counts from the transaction's start. When another member of the group has
// a transaction open at the same coordinator, and the watch looks again
// when a transaction is about to be due, a kill -9 stalls the others for
// about the bound.

// stuckPoll is how often a loop partition's progress is checked, and how
// often the open transactions are looked at (one ListTransactions per
// broker) while a loop partition the instance owns is held.
const stuckPoll = 500 * time.Millisecond

// stuckSoonest is the least wait before the watch looks again at a
// transaction about to be due, so that a kill -9 stalls the others for
// about the bound, not the bound rounded up to the next poll.
const stuckSoonest = 20 * time.Millisecond

// stuckRefence is how long a transactional ID fenced as stuck is not fenced
// as stuck again.
const stuckRefence = 5 * time.Minute

// DefaultFenceStuckAfter is the least default of Config.Transactions.FenceStuckAfter.
const DefaultFenceStuckAfter = 2 * time.Second

// stuckFloor is how long a live member's transaction may stay open: a
// commit interval. A handler's calls, however slow, and its retries run
// beside the loop (calls.go), which commits on the interval meanwhile.
// Config.Transactions.FenceStuckAfter must exceed it.
func stuckFloor(commitInterval time.Duration) time.Duration {
	return commitInterval
}

// stuckBound is Config.Transactions.FenceStuckAfter for a configured value (0: the
// default, DefaultFenceStuckAfter or twice stuckFloor when longer).
func stuckBound(commitInterval, configured time.Duration) time.Duration {
	if configured != 0 {
		return configured
	}
	return max(DefaultFenceStuckAfter, 2*stuckFloor(commitInterval))
}

// stuckWatch is the Processor's watcher of stuck transactions. Its members'
// loop claims tell it of a claim that did not move (suspect); run, owned by
// Processor.run, asks whether records wait beyond it, and if so looks at
// the open transactions and has the Processor's aborter (abort.go) fence
// those stuck. The claims do no I/O of their own: a claim's goroutine must
// stop at once when its session ends.
type stuckWatch struct {
	aborter *aborter
	log     *slog.Logger
	topic   string // the loop topic
	wake    chan struct{}
	track   stuckTracker

	mu       sync.Mutex
	suspects map[int32]int64 // loop partitions that did not move: their next offset

	warned time.Time // run's last failure warning: at most one a minute
}

// newStuckWatch is the watch of loopTopic's claims that aborts, through a,
// the transactions of other instances that stay open for after; it logs on
// log.
func newStuckWatch(a *aborter, log *slog.Logger, loopTopic string, after time.Duration) *stuckWatch {
	return &stuckWatch{aborter: a, log: log, topic: loopTopic, wake: make(chan struct{}, 1), suspects: map[int32]int64{},
		track: stuckTracker{group: a.group, own: a.name, after: after, refence: stuckRefence}}
}

// suspect tells the watch that a loop partition's next offset did not move
// for a stuckPoll; it never blocks.
func (w *stuckWatch) suspect(partition int32, next int64) {
	w.mu.Lock()
	w.suspects[partition] = next
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// takeSuspects returns the suspects told since the last call.
func (w *stuckWatch) takeSuspects() map[int32]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.suspects
	w.suspects = map[int32]int64{}
	return s
}

// held tells whether records wait beyond a suspect's next offset: the
// partition's log end (ListOffsets, read_uncommitted) is more than a
// trailing commit marker beyond it. A claim's high-water mark cannot tell:
// sarama takes it only from fetches that return records, and a held claim
// fetches none. An idle partition costs one ListOffsets per stuckPoll.
func (w *stuckWatch) held(client sarama.Client, suspects map[int32]int64) bool {
	for p, next := range suspects {
		end, err := client.GetOffset(w.topic, p, sarama.OffsetNewest)
		if err == nil && end-next > 1 {
			return true
		}
	}
	return false
}

// run looks at the open transactions each time a suspect is held, at most
// once per stuckPoll, and again when one will be due before the next poll,
// until ctx is done. Errors are logged and retried at the next wake: the
// leader's fencing and the broker's expiry remain.
func (w *stuckWatch) run(ctx context.Context) {
	var admin sarama.ClusterAdmin // its client reads uncommitted (held)
	var client sarama.Client
	defer func() {
		if admin != nil {
			admin.Close()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		}
		if admin == nil {
			var err error
			if client, admin, err = w.connect(); err != nil {
				w.warn("could not look for stuck transactions", err)
			}
		}
		for looks := admin != nil && w.held(client, w.takeSuspects()); looks; {
			next, err := w.look(client, admin.(sarama.TransactionClusterAdmin))
			if err != nil {
				w.warn("could not look for stuck transactions; a transaction left open by a dead instance "+
					"holds the partitions it wrote until the group or the broker aborts it", err)
				if errors.Is(err, sarama.ErrUnsupportedVersion) {
					return // brokers before Kafka 3.0: nothing to look with
				}
				admin.Close()
				admin = nil
				break
			}
			if looks = next > 0 && next < stuckPoll; looks && !sleep(ctx, max(next, stuckSoonest)) {
				return
			}
		}
		if !sleep(ctx, stuckPoll) {
			return
		}
	}
}

// connect makes the watch's client and an admin on it (closing the admin
// closes the client).
func (w *stuckWatch) connect() (sarama.Client, sarama.ClusterAdmin, error) {
	client, err := w.aborter.connect()
	if err != nil {
		return nil, nil, err
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return client, admin, nil
}

// warn logs a failure of run's, at most once a minute.
func (w *stuckWatch) warn(msg string, err error) {
	if time.Since(w.warned) >= time.Minute {
		w.warned = time.Now()
		w.log.Warn(msg, "err", err)
	}
}

// look reads the group's open transactions and aborts those that are due;
// next is how soon another one will be (0: none is watched).
// With a broker down it goes on with what the others answered: a
// transaction that broker coordinates is then not seen, so not fenced.
func (w *stuckWatch) look(client sarama.Client, admin sarama.TransactionClusterAdmin) (next time.Duration, err error) {
	// Every member's, this instance's too: their start times tell the
	// coordinators' clocks (ageFloors).
	ids, partial, err := w.aborter.list(client)
	if err != nil {
		return 0, fmt.Errorf("list transactions: %w", err)
	}
	if partial != nil {
		w.warn("some brokers did not list their open transactions; looking at the others'", partial)
	}
	var states map[string]sarama.TransactionState
	if slices.ContainsFunc(ids, w.track.watched) {
		if states, err = admin.DescribeTransactions(ids); err != nil && len(states) == 0 {
			return 0, fmt.Errorf("describe transactions: %w", err)
		}
		if err != nil {
			w.warn("some open transactions could not be described; looking at the others", err)
		}
	}
	floors := ageFloors(states, func(id string) (int32, bool) {
		b, err := client.TransactionCoordinator(id) // cached since DescribeTransactions
		if err != nil {
			return 0, false
		}
		return b.ID(), true
	})
	fence, spared, next := w.track.due(time.Now(), states, floors)
	for _, id := range spared {
		w.log.Warn("a transaction of this group has been open longer than --fence-stuck-after again; not fencing it "+
			"again so soon: if its instance is alive, its transactions take longer than the bound, so raise --fence-stuck-after",
			"transactionalId", id, "after", w.track.after)
	}
	w.aborter.abort(w.log, triggerStuck, fence, "after", w.track.after)
	return next, nil
}

// stuckTracker decides which transactions are stuck. It holds no client,
// so its rules are tested on their own.
type stuckTracker struct {
	group   string
	own     string // this instance's name (<group>-<instance id>): its transactions are never fenced here
	after   time.Duration
	refence time.Duration

	mu     sync.Mutex
	seen   map[string]sighting  // open transactions by ID, as first seen
	fenced map[string]time.Time // when each ID was last fenced as stuck
}

// sighting is one open transaction and when it was first seen open.
type sighting struct {
	producerID int64
	epoch      int16
	start      int64 // the coordinator's start time
	first      time.Time
	quiet      time.Time // spared: not due again before then
}

// ageFloors is, for each ongoing transaction of states, how much older it
// is than the newest ongoing one its coordinator described: a lower bound
// of its age on the coordinator's clock (0 when coordinator does not know
// its coordinator).
func ageFloors(states map[string]sarama.TransactionState, coordinator func(id string) (int32, bool)) map[string]time.Duration {
	type start struct {
		coordinator int32
		at          int64
	}
	starts := make(map[string]start, len(states))
	newest := map[int32]int64{}
	for id, s := range states {
		if s.TransactionState != sarama.TransactionStateOngoing || !errors.Is(s.ErrorCode, sarama.ErrNoError) {
			continue
		}
		c, ok := coordinator(id)
		if !ok {
			continue
		}
		starts[id] = start{c, s.TransactionStartTime}
		newest[c] = max(newest[c], s.TransactionStartTime)
	}
	floors := make(map[string]time.Duration, len(starts))
	for id, s := range starts {
		floors[id] = time.Duration(newest[s.coordinator]-s.at) * time.Millisecond
	}
	return floors
}

// watched tells whether id is another instance's member of the group.
func (t *stuckTracker) watched(id string) bool {
	return kafkautil.MemberTxnID(t.group, id) && !kafkautil.InstanceTxnID(t.own, id)
}

// due takes the open transactions seen at now, with their ages on their
// coordinators' clocks (ageFloors), and returns those to fence now, those
// stuck again within refence of their last fencing, and how soon the next
// of the others will be due if it stays open (0: none).
func (t *stuckTracker) due(now time.Time, open map[string]sarama.TransactionState, floors map[string]time.Duration) (fence, spared []string, next time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.seen == nil {
		t.seen, t.fenced = map[string]sighting{}, map[string]time.Time{}
	}
	for id := range t.seen {
		if s, ok := open[id]; !ok || s.TransactionState != sarama.TransactionStateOngoing {
			delete(t.seen, id)
		}
	}
	for id, s := range open {
		if !t.watched(id) || s.TransactionState != sarama.TransactionStateOngoing || !errors.Is(s.ErrorCode, sarama.ErrNoError) {
			continue
		}
		got := sighting{producerID: s.ProducerID, epoch: s.ProducerEpoch, start: s.TransactionStartTime, first: now}
		was, ok := t.seen[id]
		if !ok || was.producerID != got.producerID || was.epoch != got.epoch || was.start != got.start {
			was = got
			t.seen[id] = was
		}
		if now.Before(was.quiet) {
			continue
		}
		if age := max(now.Sub(was.first), floors[id]); age < t.after {
			if next == 0 || t.after-age < next {
				next = t.after - age
			}
			continue
		}
		if last, ok := t.fenced[id]; ok && now.Sub(last) < t.refence {
			// Warned about once per sighting, not at every poll.
			was.quiet = now.Add(t.refence)
			t.seen[id] = was
			spared = append(spared, id)
			continue
		}
		t.fenced[id] = now
		delete(t.seen, id)
		fence = append(fence, id)
	}
	return fence, spared, next
}

// watchBlocked tells the stuck watch of the loop claim each stuckPoll its
// next offset did not move. The claim's ConsumeClaim owns it: the returned
// function stops it and waits.
func (m *member) watchBlocked(claim sarama.ConsumerGroupClaim, progress *claimProgress) (stop func()) {
	if m.bg.stuck == nil || claim.Topic() != m.loopTopic {
		return func() {}
	}
	last := progress.next.Load() // only the ticking goroutine uses it from here
	return ticking(stuckPoll, func() {
		if next := progress.next.Load(); next == last && next >= 0 {
			m.bg.stuck.suspect(claim.Partition(), next)
		} else {
			last = next
		}
	})
}
