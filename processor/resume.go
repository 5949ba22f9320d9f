package processor

import (
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// A member holds the Processor's background work (key filter builds and
// standby opens, scanpace.go) from its Setup until its partitions process
// again. The first commit after the restores is not enough to end it: that
// transaction holds the records of the claims whose fetches came back first,
// and background work released then slows the commit the other partitions
// still wait for. So the hold ends once every claimed partition has
// resumed: a commit since the Setup took its offset, or it has nothing to
// process (its claim's high-water mark is at most the commit marker beyond
// the next offset to process). resumeHoldMax bounds it for a partition
// whose records stay out of reach (a transaction another producer left
// open pins its last stable offset until it ends).

// resumeHoldMax is the longest a member holds the background work after its
// partitions were restored.
const resumeHoldMax = 3 * time.Second

// resumeWatch is which claimed partitions of a session have not resumed yet.
// Setup resets it, the claims' goroutines register, the loop clears the
// partitions its commits took.
type resumeWatch struct {
	mu      sync.Mutex
	pending map[topicPartition]*claimWatch // not resumed; nil: its claim has not started
	readyAt time.Time                      // the restores ended; zero: not yet
}

// claimWatch is a started claim and how far the loop processed it.
type claimWatch struct {
	claim    sarama.ConsumerGroupClaim
	progress *claimProgress
}

// reset starts a session with claims, none resumed.
func (w *resumeWatch) reset(claims map[string][]int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending = map[topicPartition]*claimWatch{}
	for topic, parts := range claims {
		for _, p := range parts {
			w.pending[topicPartition{topic, p}] = nil
		}
	}
	w.readyAt = time.Time{}
}

// started notes that claim's goroutine hands its records to the loop.
func (w *resumeWatch) started(claim sarama.ConsumerGroupClaim, progress *claimProgress) {
	w.mu.Lock()
	defer w.mu.Unlock()
	tp := topicPartition{claim.Topic(), claim.Partition()}
	if _, ok := w.pending[tp]; ok {
		w.pending[tp] = &claimWatch{claim: claim, progress: progress}
	}
}

// restored notes that the session's restores ended at now.
func (w *resumeWatch) restored(now time.Time) {
	w.mu.Lock()
	w.readyAt = now
	w.mu.Unlock()
}

// committed notes the partitions whose offsets a commit took.
func (w *resumeWatch) committed(offsets map[string]map[int32]int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for topic, parts := range offsets {
		for p := range parts {
			delete(w.pending, topicPartition{topic, p})
		}
	}
}

// resumed reports whether every claimed partition has resumed at now, or
// the restores ended resumeHoldMax ago.
func (w *resumeWatch) resumed(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.readyAt.IsZero() {
		return false
	}
	if now.Sub(w.readyAt) >= resumeHoldMax {
		return true
	}
	for _, c := range w.pending {
		if c == nil || c.claim.HighWaterMarkOffset()-c.progress.next.Load() > 1 {
			return false
		}
	}
	return true
}

// releaseScansOnceResumed ends m's hold on the background work once its
// partitions resumed. The loop calls it after each commit and on each commit
// tick (an idle partition resumes without a commit).
func (m *member) releaseScansOnceResumed() {
	if m.bg.holdingScans.Load() && m.session.ready.Load() && m.session.resume.resumed(time.Now()) {
		m.bg.releaseScans()
	}
}
