package processor

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// With Concurrency 1 (the default) the loop makes each handler call itself:
// handing every call to a worker goroutine and back would cost a fast
// handler a large share of its throughput in goroutine switches and
// wake-ups. But a call can
// take seconds, and the loop's own work must go on meanwhile: taking the
// producer's acknowledgements, committing on the commit interval (a
// transaction must hold only events that are done, and never stay open
// through calls of seconds), finishing a commit, adopting a restored table.
//
// So a stand-in does that work while the loop is inside a call. The loop
// holds standIn.mu at all times but inside a call, so everything it owns is
// the stand-in's only while the loop runs user code that touches none of
// it. Every commit interval the stand-in looks whether a call has been
// running for a commit interval, and if so takes the lock: it commits and
// serves the loop's channels until that call has returned; the loop then
// takes the lock back. A call of microseconds costs the loop an unlock, a
// lock and a few atomic operations; only a long call meets the stand-in.

// standIn is a session's stand-in for its loop; nil in tests that drive a
// member without its loop.
type standIn struct {
	mu             sync.Mutex    // the loop's, but inside a call
	started, ended atomic.Uint64 // calls the loop began and ended
	since          atomic.Int64  // the running call's start, unix nanoseconds
	active         atomic.Bool   // the stand-in holds mu
	reclaim        chan struct{} // the loop wants mu back; room for one
}

// enter leaves the loop's state to the stand-in for a handler call begun
// at start; leave takes it back once the call returned. A nil standIn does
// nothing.
func (s *standIn) enter(start time.Time) {
	if s == nil {
		return
	}
	s.since.Store(start.UnixNano())
	s.started.Add(1)
	s.mu.Unlock()
}

func (s *standIn) leave() {
	if s == nil {
		return
	}
	// Either the loop sees active and wakes the stand-in, or the stand-in
	// sees ended and leaves by itself (both are sequentially consistent).
	s.ended.Add(1)
	if s.active.Load() {
		select {
		case s.reclaim <- struct{}{}:
		default: // one is pending already
		}
	}
	s.mu.Lock()
}

// startStandIn starts the session's stand-in, with the loop holding its
// lock; the returned function stops it and waits for it.
func (m *member) startStandIn(sess sarama.ConsumerGroupSession) (stop func()) {
	s := &standIn{reclaim: make(chan struct{}, 1)}
	s.mu.Lock()
	m.session.standIn = s
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(m.cfg.Transactions.CommitInterval)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			// Only a call that has run for a commit interval: the loop
			// commits between shorter ones itself (member.handle), and a
			// stand-in taking over calls of microseconds would only make
			// the loop wait for the lock.
			long := time.Since(time.Unix(0, s.since.Load())) >= m.cfg.Transactions.CommitInterval
			if s.started.Load() > s.ended.Load() && long && s.mu.TryLock() {
				m.standInServe(sess, s, tick.C)
				s.mu.Unlock()
			}
		}
	}()
	return func() {
		close(quit)
		<-done
		m.session.standIn = nil
	}
}

// standInServe does the loop's work until the call the loop is in has
// returned. The commit interval ended while the loop was in the call, so it
// commits first.
func (m *member) standInServe(sess sarama.ConsumerGroupSession, s *standIn, tick <-chan time.Time) {
	select { // a wake-up left from an earlier call
	case <-s.reclaim:
	default:
	}
	s.active.Store(true)
	defer s.active.Store(false)
	inCall := s.started.Load()
	if s.ended.Load() < inCall {
		m.commit(sess)
	}
	for s.ended.Load() < inCall {
		m.serveOnce(sess, nil, s.reclaim, tick)
	}
}
