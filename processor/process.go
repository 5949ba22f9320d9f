package processor

import (
	"fmt"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/engine"
	"github.com/dedupkit/dedup/internal/leveldbx"
)

// One record's way through the loop: judged, its handler called (by the
// loop itself with Concurrency 1, by the calls' workers above it, or parked
// behind a busy key), finished into the open transaction, and its offset
// marked done (calls.go says why in that order).

// process runs the topology's engine for one message, prepared on its
// claim's goroutine, up to its handler call, which it starts (calls.go);
// finishCall ends it. A failure of the runtime (a table partition it cannot
// read or decode) aborts the transaction and stops the member: the same
// message would fail every transaction that holds it again. A store LevelDB
// found damaged is the exception: it is deleted when the session ends, and
// the rejoin restores it from the changelog (store_corrupt.go), so the
// message is judged again against a sound table.
func (m *member) process(sess sarama.ConsumerGroupSession, in inbound) {
	msg := in.msg
	t := m.tables.byPartition[msg.Partition]
	// A nil table is an input partition whose table another member holds
	// while this one warms it up (no restore of it): the engine forwards
	// what it would judge there (txnContext.Table).
	if t == nil && (m.session.restores[msg.Partition] != nil || msg.Topic == m.loopTopic) {
		m.failedAt(msg, fmt.Errorf("message from unassigned partition %s/%d", msg.Topic, msg.Partition))
		return
	}
	if m.session.calls.limit == 1 { // one record at a time, to its end: no allocation for it
		m.session.inline = flight{in: in, tp: topicPartition{msg.Topic, msg.Partition}}
		m.begin(sess, &m.session.inline)
		return
	}
	f := &flight{in: in, tp: topicPartition{msg.Topic, msg.Partition}}
	f.keys[0], f.keys[1] = engine.Keys(m.topo, in.prep)
	if !m.admit(sess, f) {
		return
	}
	m.begin(sess, f)
}

// admit waits for a free call for f, or parks f behind a busy key of its
// (calls.go); false when f was parked or the transaction failed meanwhile.
// Parked records are bounded by the concurrency: past it, the loop waits.
func (m *member) admit(sess sarama.ConsumerGroupSession, f *flight) bool {
	ended := sess.Context().Done()
	over := func() bool {
		select {
		case <-ended:
			return true
		default:
			return m.tx.failed
		}
	}
	for {
		switch c := m.session.calls; {
		case m.tx.failed:
			return false
		case over():
			// The session ended while f waited: no parked record starts
			// any more. f is the next owner's, and its offset is held so
			// that no later record of its partition is committed past it.
			c.hold(f)
			return false
		case c.blocked(f.keys) && c.parked < c.limit:
			c.park(f)
			return false
		case c.blocked(f.keys):
			m.awaitCalls(sess, func() bool { return over() || c.parked < c.limit })
		case c.running >= c.limit:
			m.awaitCalls(sess, func() bool { return over() || c.running < c.limit })
		default:
			return true
		}
	}
}

// begin judges f's record and starts its handler call when it needs one;
// false when it needed none (it is done, or the transaction failed).
func (m *member) begin(sess sarama.ConsumerGroupSession, f *flight) bool {
	msg := f.in.msg
	f.rt = txnContext{m: m, ctx: m.tx.handlerCtx, table: m.tables.byPartition[msg.Partition], partition: msg.Partition}
	started, err := engine.StartRecord(m.topo, &f.rt, f.in.prep, msg.Value, &f.call)
	if err != nil {
		m.failedAt(msg, err)
		return false
	}
	if !started {
		m.markDone(f.tp, msg.Offset, f.held, f.in.progress)
		return false
	}
	if m.session.calls.limit == 1 { // made here, the stand-in committing meanwhile
		m.session.calls.note(f)
		m.session.standIn.enter(f.started)
		f.call.Run(f.rt.ctx)
		m.session.standIn.leave()
		m.finishCall(sess, f)
		return true
	}
	m.session.calls.start(f)
	return true
}

// startParked starts the parked records that can start, while calls are
// free and the session goes on.
func (m *member) startParked(sess sarama.ConsumerGroupSession) {
	c := m.session.calls
	for c.running < c.limit && !m.tx.failed && sess.Context().Err() == nil {
		f := c.nextReady()
		if f == nil {
			return
		}
		c.hooks.KeyWaited(time.Since(f.parkedAt))
		if !m.begin(sess, f) {
			c.wake(f.keys) // done at once (a duplicate, say): the next may start
		}
		m.settle(sess)
	}
}

// finishCall ends a call that returned: its outputs and seen mark go into
// the open transaction, or its event is dead-lettered (engine.Call.Finish).
func (m *member) finishCall(sess sarama.ConsumerGroupSession, f *flight) {
	m.session.calls.stopped(f)
	if m.tx.failed {
		return // the transaction is gone (a commit failed meanwhile); the events are consumed again
	}
	msg := f.in.msg
	if f.call.Interrupted() {
		// The session ended: the event is neither marked nor committed (its
		// offset stays held), and the partition's next owner, or this
		// member after it rejoined, runs it again.
		m.session.calls.hold(f)
		if sess.Context().Err() == nil {
			// The handler asked for it while the session goes on (a
			// resource that cannot commit): the transaction aborts and
			// the member rejoins, so the event runs again.
			m.abort(f.call.Err())
			return
		}
		m.log.Info("handler interrupted by the end of the session; the event runs again", "topic", msg.Topic,
			"partition", msg.Partition, "offset", msg.Offset)
		return
	}
	if err := f.call.Finish(&f.rt); err != nil {
		m.failedAt(msg, err)
		return
	}
	m.markDone(f.tp, msg.Offset, f.held, f.in.progress)
}

// callReturned finishes a call that returned and ends the transaction when
// it failed or is full.
func (m *member) callReturned(sess sarama.ConsumerGroupSession, f *flight) {
	m.finishCall(sess, f)
	m.settle(sess)
	m.startParked(sess)
}

// markDone notes the event at off of tp done: the partition's committable
// offset moves as far as the calls let it, and so does its lag.
func (m *member) markDone(tp topicPartition, off int64, held bool, progress *claimProgress) {
	next := m.session.calls.done(tp, off, held)
	if progress != nil {
		progress.done.Store(next)
	}
	if m.tx.state.offsets[tp.topic] == nil {
		m.tx.state.offsets[tp.topic] = map[int32]int64{}
	}
	m.tx.state.offsets[tp.topic][tp.partition] = next
	m.tx.state.dirty = true
}

// failedAt aborts the transaction for the engine's error at msg.
func (m *member) failedAt(msg *sarama.ConsumerMessage, err error) {
	// An interrupted call never gets here: finishCall holds its offset
	// instead (the events done before it still commit).
	switch {
	case leveldbx.Corrupted(err):
		m.abort(fmt.Errorf("table store damaged, at %s/%d@%d: %w", msg.Topic, msg.Partition, msg.Offset, err))
	default:
		m.abort(fmt.Errorf("callback failed at %s/%d@%d: %w", msg.Topic, msg.Partition, msg.Offset, err))
		m.session.fatal = err
	}
}

// awaitCalls serves the loop's calls, acknowledgements, commits and
// adopted tables until ready says the loop may go on, taking no records
// meanwhile: the next record waits for a free call or a free key. The
// commit interval keeps ticking, so a slow call never holds a transaction
// open past it.
func (m *member) awaitCalls(sess sarama.ConsumerGroupSession, ready func() bool) {
	for !ready() {
		m.serveOnce(sess, m.session.calls.results, nil, m.tx.commitTick)
	}
}

// serveOnce waits for one of the loop's own events and handles it: a call
// that returned (results), an adopted table, an acknowledgement, a commit
// that ended, the commit interval (tick), or a wake-up (wake). A nil
// channel is not waited on. awaitCalls and the stand-in share it.
func (m *member) serveOnce(sess sarama.ConsumerGroupSession, results <-chan *flight, wake <-chan struct{}, tick <-chan time.Time) {
	acks, nacks, committed := m.tx.channels()
	select {
	case f := <-results:
		m.callReturned(sess, f)
	case <-wake:
	case t := <-m.session.adopt:
		m.tables.own(t)
	case s := <-acks:
		m.acked(&m.tx.state, s)
	case e := <-nacks:
		m.nacked(&m.tx.state, e)
	case err := <-committed:
		m.committedTxn(sess, err)
	case <-tick:
		m.commit(sess)
	}
}
