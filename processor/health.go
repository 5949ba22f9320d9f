package processor

import (
	"fmt"
	"sync"
	"time"
)

// A worker whose transactions all abort (one output record the broker
// refuses aborts every transaction that holds it, and the member consumes it
// again after each abort) or whose commit hangs (commit_watch.go) processes
// nothing, yet its tables are restored and its process is up. Health tells
// that: each member tracks its consecutive aborted transactions and, per
// input partition, since when it holds consumed records that are not
// committed. Records of an aborted transaction stay uncommitted: the member
// consumes them again after it rejoined, so an abort does not reset their
// clock; only a commit does. The clock is exact and cheap (the loop notes a
// batch's partitions and a commit's offsets), where input lag would need the
// high watermarks, and on a transactional topic the commit markers keep a
// caught-up group's lag above zero.

// Health is the worker's state for /readyz and /healthz.
type Health struct {
	// Ready: every member has its tables restored and can commit.
	Ready bool
	// Live: no member has held uncommitted records past LiveStallAfter.
	// A worker that is not live should be restarted.
	Live bool
	// Reasons say why the worker is not ready or not live; empty when it is
	// both.
	Reasons []string
	// ConsecutiveAborts is the most transactions a member aborted in a row
	// since its last commit.
	ConsecutiveAborts int
	// Uncommitted is how long the oldest consumed record that is not
	// committed has waited (the longest over the members; 0: none).
	Uncommitted time.Duration
	// LastCommit is when a member last committed (the latest over the
	// members); zero before the first commit.
	LastCommit time.Time
}

// topicPartition names an input or loop partition.
type topicPartition struct {
	topic     string
	partition int32
}

// memberHealth is one member's commit progress. The member's loop writes it
// (per batch and per transaction); Processor.Health reads it from HTTP
// handlers, hence the lock. Zero value: nothing consumed, nothing aborted.
type memberHealth struct {
	mu         sync.Mutex
	aborts     int
	lastCommit time.Time
	pending    map[topicPartition]time.Time // consumed and not committed, since
	paused     time.Time                    // restoring since; zero: not
}

// healthSnapshot is memberHealth at one moment.
type healthSnapshot struct {
	aborts     int
	lastCommit time.Time
	oldest     time.Time // of the pending records; zero: none
}

// consumed notes that the loop took batch at now.
func (h *memberHealth) consumed(now time.Time, batch []inbound) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.init()
	var last topicPartition
	for i, in := range batch {
		tp := topicPartition{in.msg.Topic, in.msg.Partition}
		if i > 0 && tp == last { // a batch is one claim's: usually one partition
			continue
		}
		last = tp
		if _, ok := h.pending[tp]; !ok {
			h.pending[tp] = now
		}
	}
}

// committed notes a transaction committed at now: its partitions' records
// are committed, except those consumed after it was sealed at sealed, which
// the open transaction holds (open) and which have waited since then at most.
func (h *memberHealth) committed(now, sealed time.Time, done, open map[string]map[int32]int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.init()
	h.aborts = 0
	h.lastCommit = now
	for topic, parts := range done {
		for p := range parts {
			tp := topicPartition{topic, p}
			if _, ok := open[topic][p]; ok {
				h.pending[tp] = sealed
			} else {
				delete(h.pending, tp)
			}
		}
	}
}

func (h *memberHealth) init() {
	if h.pending == nil {
		h.pending = map[topicPartition]time.Time{}
	}
}

// aborted notes an aborted transaction. Its records stay pending: the member
// consumes them again after it rejoined.
func (h *memberHealth) aborted() {
	h.mu.Lock()
	h.aborts++
	h.mu.Unlock()
}

// restoring notes that a new session with claims starts restoring its
// tables at now. Records of partitions that moved to another member are that
// member's to commit now. When nothing pending is left, the aborts are
// forgotten too: what failed is no longer this member's work. (A
// transaction of sweeper tombstones alone has no input records; were it to
// abort in every session, the input records that come next abort too, and
// those are counted.) The pending records' wait stops until restored: a
// restore is progress, and a long one (a rebalance that brought partitions
// with big tables) must not make the worker look wedged, or it would be
// restarted into the same restore.
func (h *memberHealth) restoring(now time.Time, claims map[string][]int32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.paused.IsZero() {
		h.paused = now
	}
	for tp := range h.pending {
		if !claimed(claims, tp) {
			delete(h.pending, tp)
		}
	}
	if len(h.pending) == 0 {
		h.aborts = 0
	}
}

// restored notes that the restore begun by restoring ended at now (done or
// failed): the pending records' wait goes on from where it stopped.
func (h *memberHealth) restored(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.paused.IsZero() {
		return
	}
	for tp, since := range h.pending {
		h.pending[tp] = since.Add(now.Sub(h.paused))
	}
	h.paused = time.Time{}
}

func claimed(claims map[string][]int32, tp topicPartition) bool {
	for _, p := range claims[tp.topic] {
		if p == tp.partition {
			return true
		}
	}
	return false
}

// snapshot is h at now; while restoring, the pending records' wait is
// what it was when the restore began.
func (h *memberHealth) snapshot(now time.Time) healthSnapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := healthSnapshot{aborts: h.aborts, lastCommit: h.lastCommit}
	for _, since := range h.pending {
		if s.oldest.IsZero() || since.Before(s.oldest) {
			s.oldest = since
		}
	}
	if !s.oldest.IsZero() && !h.paused.IsZero() {
		s.oldest = s.oldest.Add(now.Sub(h.paused))
	}
	return s
}

// healthLimits are the Config bounds health is judged by.
type healthLimits struct {
	abortLimit            int
	readyStall, liveStall time.Duration
}

func (c *Config) healthLimits() healthLimits {
	return healthLimits{abortLimit: c.Health.ReadyAbortLimit, readyStall: c.Health.ReadyStallAfter, liveStall: c.Health.LiveStallAfter}
}

// memberState is what judge needs of one member.
type memberState struct {
	restored bool // the member has a session and its tables are restored
	healthSnapshot
}

// judge works out the worker's health at now from its members' states.
func judge(now time.Time, lim healthLimits, members []memberState) Health {
	h := Health{Ready: true, Live: true}
	restoring := false
	for _, m := range members {
		restoring = restoring || !m.restored
		h.ConsecutiveAborts = max(h.ConsecutiveAborts, m.aborts)
		if !m.oldest.IsZero() {
			h.Uncommitted = max(h.Uncommitted, now.Sub(m.oldest))
		}
		if m.lastCommit.After(h.LastCommit) {
			h.LastCommit = m.lastCommit
		}
	}
	if restoring {
		h.Ready = false
		h.Reasons = append(h.Reasons, "partitions are being assigned or their tables restored")
	}
	if h.ConsecutiveAborts >= lim.abortLimit {
		h.Ready = false
		h.Reasons = append(h.Reasons, fmt.Sprintf("%d transactions aborted in a row (not ready from %d)",
			h.ConsecutiveAborts, lim.abortLimit))
	}
	switch {
	case h.Uncommitted >= lim.liveStall:
		h.Ready, h.Live = false, false
		h.Reasons = append(h.Reasons, fmt.Sprintf("records consumed %v ago are not committed (not live from %v)",
			h.Uncommitted.Round(time.Second), lim.liveStall))
	case h.Uncommitted >= lim.readyStall:
		h.Ready = false
		h.Reasons = append(h.Reasons, fmt.Sprintf("records consumed %v ago are not committed (not ready from %v)",
			h.Uncommitted.Round(time.Second), lim.readyStall))
	}
	return h
}
