package processor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// A transaction's commit has a Kafka part and a LevelDB part. The Kafka part
// (waiting for the last acknowledgements, adding the consumed offsets,
// EndTxn) is a few round trips to the broker, a large share of the loop's
// time if it stood still through them. So it runs in a goroutine
// (pendingCommit) while the loop goes on processing the next messages. What they produce is held back in member.staged, not sent: the
// producer cannot begin the next transaction before EndTxn returned, and a
// record sent too early would join the committing transaction. Their table
// writes go to a fresh overlay over the sealed one (store.Seal). Once Kafka
// committed, the goroutine writes the sealed overlays to LevelDB too
// (store_seal.go says why the loop may read the stores meanwhile); then the
// loop drops them and sends the staged records, which begin the next
// transaction. When the commit failed, abort drops both overlays and the
// staged records, and the member resumes from the committed offsets: the
// staged records' inputs were not committed either.

// pendingCommit is a transaction being committed.
type pendingCommit struct {
	txn     txnState
	start   time.Time
	records int // produced in the transaction, for the stall warning
	sealed  []sealedStore
	done    chan error   // one value, when the commit ended
	step    atomic.Int32 // commitStep, read by the watcher (commit_watch.go)
}

// sealedStore is a partition store with a sealed transaction and, once
// written, its entry count's change.
type sealedStore struct {
	p     int32
	t     *partitionTable
	delta int64
}

// applyError is a failure to write a committed transaction to LevelDB.
type applyError struct {
	p   int32
	err error
}

func (e *applyError) Error() string { return fmt.Sprintf("partition %d: %v", e.p, e.err) }
func (e *applyError) Unwrap() error { return e.err }

// commit starts committing the open transaction, or, while another commit
// is still running, marks it due: the loop starts it when that one ended.
func (m *member) commit(sess sarama.ConsumerGroupSession) {
	if m.tx.committing != nil {
		m.tx.commitDue = true
		return
	}
	m.startCommit(sess)
}

// commitFull commits a transaction that reached MaxBatch records: it waits
// for a running commit, which sends the staged records, and starts the next.
func (m *member) commitFull(sess sarama.ConsumerGroupSession) {
	m.awaitCommit()
	m.startCommit(sess)
}

// commitAndWait commits everything processed so far and waits for it, at
// the end of a session.
func (m *member) commitAndWait(sess sarama.ConsumerGroupSession) {
	m.awaitCommit()
	m.startCommit(sess)
	m.awaitCommit()
}

// startCommit seals the open transaction and starts committing it. The
// goroutine owns the producer and the sealed overlays' LevelDB writes until
// it reported on done; the loop neither sends nor reads acknowledgements
// meanwhile, and always waits for it (finishCommit, awaitCommit, abort)
// before the session ends.
func (m *member) startCommit(sess sarama.ConsumerGroupSession) {
	if m.tx.committing != nil {
		return
	}
	m.tx.commitDue = false
	if m.tx.failed {
		return
	}
	if !m.tx.state.dirty {
		return
	}
	pc := &pendingCommit{txn: m.tx.state, start: time.Now(), records: m.tx.state.sent, done: make(chan error, 1)}
	for p, t := range m.tables.byPartition {
		if t.store.Seal() {
			pc.sealed = append(pc.sealed, sealedStore{p: p, t: t})
		}
	}
	m.tx.state = newTxnState()
	m.tx.committing = pc
	stopWatch := m.watchCommit(pc)
	go func() {
		err := m.commitSealed(sess, pc)
		stopWatch()
		pc.done <- err
	}()
}

// commitSealed commits pc in Kafka and then writes its overlays to LevelDB
// with the changelog offset each reached (an applyError when that fails).
func (m *member) commitSealed(sess sarama.ConsumerGroupSession, pc *pendingCommit) error {
	if err := m.commitTxn(sess, pc); err != nil {
		return err
	}
	pc.setStep(stepLevelDB)
	for i := range pc.sealed {
		ss := &pc.sealed[i]
		off, ok := pc.txn.next[ss.p]
		if !ok {
			off = -1
		}
		delta, err := ss.t.store.WriteSealed(off)
		if err != nil {
			return &applyError{p: ss.p, err: err}
		}
		ss.delta = delta
	}
	return nil
}

// awaitCommit waits for a running commit and finishes it.
func (m *member) awaitCommit() {
	if m.tx.committing != nil {
		m.finishCommit(<-m.tx.committing.done)
	}
}

// finishCommit ends a commit that reported err: on success the stores drop
// their sealed overlays, which LevelDB holds now, and the staged records are
// sent; on a Kafka failure it aborts.
func (m *member) finishCommit(err error) {
	pc := m.tx.committing
	m.tx.committing = nil
	if err != nil && !isApplyError(err) {
		m.abort(err)
		return
	}
	if !m.committed(pc, err) {
		return
	}
	staged := m.tx.staged
	for _, msg := range staged {
		m.send(msg)
	}
	clear(staged)
	m.tx.staged = staged[:0]
}

// awaitCommitted, for abort, waits for a running commit and, if it
// succeeded, drops its sealed overlays.
func (m *member) awaitCommitted() {
	if m.tx.committing == nil {
		return
	}
	pc := m.tx.committing
	m.tx.committing = nil
	if err := <-pc.done; err == nil || isApplyError(err) {
		m.committed(pc, err)
	}
}

// openOffsets are the partitions whose records are consumed and not
// committed: those of the open transaction, and those a call holds.
func (m *member) openOffsets() map[string]map[int32]int64 {
	if m.session.calls.held == 0 {
		return m.tx.state.offsets
	}
	open := make(map[string]map[int32]int64, len(m.tx.state.offsets)+1)
	for topic, parts := range m.tx.state.offsets {
		open[topic] = maps.Clone(parts)
	}
	for tp, h := range m.session.calls.parts {
		if len(h.offsets) == 0 {
			continue
		}
		if open[tp.topic] == nil {
			open[tp.topic] = map[int32]int64{}
		}
		if _, ok := open[tp.topic][tp.partition]; !ok {
			open[tp.topic][tp.partition] = h.offsets[0]
		}
	}
	return open
}

func isApplyError(err error) bool {
	var ae *applyError
	return errors.As(err, &ae)
}

// committed ends a transaction Kafka committed; false when writing it to
// LevelDB failed (err), which stops the member: the store is behind its
// stored changelog offset's data, and the next owner restores.
func (m *member) committed(pc *pendingCommit, err error) bool {
	if err != nil {
		m.session.fatal = err
		m.tx.failed = true
		m.session.cancelSession()
		return false
	}
	for _, ss := range pc.sealed {
		ss.t.store.DoneSealed(ss.delta)
		m.reportTable(ss.p, ss.t.store)
	}
	m.health.committed(time.Now(), pc.start, pc.txn.offsets, m.openOffsets())
	if m.bg.holdingScans.Load() { // once released, nothing reads it until the next Setup
		m.session.resume.committed(pc.txn.offsets)
		m.releaseScansOnceResumed()
	}
	m.hooks.TxnCommitted(time.Since(pc.start), pc.txn.sent)
	return true
}

// commitTxn is the Kafka part of a commit, run by the pendingCommit's
// goroutine: it waits for the transaction's records, adds the consumed
// offsets with the live session's group metadata and commits.
func (m *member) commitTxn(sess sarama.ConsumerGroupSession, pc *pendingCommit) error {
	t := &pc.txn
	m.flush(t)
	if t.err != nil {
		return t.err
	}
	if !m.tx.beginTxn(t) { // only offsets to commit
		return t.err
	}
	if m.cfg.internal.beforeCommit != nil {
		if err := m.cfg.internal.beforeCommit(); err != nil {
			return &crash{err}
		}
	}
	offsets := make(map[string][]*sarama.PartitionOffsetMetadata, len(t.offsets))
	for topic, parts := range t.offsets {
		for p, off := range parts {
			offsets[topic] = append(offsets[topic], &sarama.PartitionOffsetMetadata{Partition: p, Offset: off})
		}
	}
	if len(offsets) > 0 {
		pc.setStep(stepOffsets)
		meta := sarama.NewConsumerGroupMetadataFromSession(sess, m.topo.Group, &m.memberName)
		if err := m.tx.producer.AddOffsetsToTxnWithGroupMetadata(offsets, meta); err != nil {
			return fmt.Errorf("add offsets to transaction: %w", err)
		}
	}
	pc.setStep(stepEndTxn)
	if err := m.commitResources(); err != nil {
		return err
	}
	if err := m.tx.producer.CommitTxn(); err != nil {
		return fmt.Errorf("commit transaction: %w", err)
	}
	if m.cfg.internal.afterCommit != nil {
		if err := m.cfg.internal.afterCommit(); err != nil {
			return &crash{err}
		}
	}
	return nil
}

// commitResources commits the stores outside Kafka that handlers joined
// (dedup.Resource), just before the Kafka commit: the other order would
// leave the Kafka outputs of an event committed whose database work a crash
// then lost. This order's crash window (the database committed, Kafka not)
// is the resources' to close: the events come again, and a resource such
// as package inbox answers them from what it committed. The session's
// context may be done already (the last commit of a revoked session), so
// the resources get their own, bounded by the transaction timeout.
func (m *member) commitResources() error {
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.Transactions.Timeout)
	defer cancel()
	if err := m.tx.resources.Commit(ctx); err != nil {
		return fmt.Errorf("commit a resource joined to the transaction: %w", err)
	}
	if m.cfg.internal.afterResources != nil {
		if err := m.cfg.internal.afterResources(); err != nil {
			return &crash{err}
		}
	}
	return nil
}
