package processor

import (
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// A transaction's commit has a Kafka part and a LevelDB part. The Kafka part
// (waiting for the last acknowledgements, adding the consumed offsets,
// EndTxn) is a few round trips to the broker, and the loop used to stand
// still through them: about a third of its time on this machine. Now it runs
// in a goroutine (pendingCommit) while the loop goes on processing the next
// messages. What they produce is held back in member.staged, not sent: the
// producer cannot begin the next transaction before EndTxn returned, and a
// record sent too early would join the committing transaction. Their table
// writes go to a fresh overlay over the sealed one (store.Seal). Once the
// commit succeeded, the loop writes the sealed overlays to LevelDB and sends
// the staged records, which begin the next transaction. When it failed,
// abort drops both overlays and the staged records, and the member resumes
// from the committed offsets: the staged records' inputs were not committed
// either.

// pendingCommit is a transaction whose Kafka part is being committed.
type pendingCommit struct {
	txn   txnState
	start time.Time
	done  chan error // one value, when the Kafka part ended
}

// commit starts committing the open transaction, or, while another commit
// is still running, marks it due: the loop starts it when that one ended.
func (m *member) commit(sess sarama.ConsumerGroupSession) {
	if m.committing != nil {
		m.commitDue = true
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

// startCommit seals the open transaction and starts its Kafka part. The
// goroutine owns the producer until it reported on done; the loop neither
// sends nor reads acknowledgements meanwhile, and always waits for it
// (finishCommit, awaitCommit, abort) before the session ends.
func (m *member) startCommit(sess sarama.ConsumerGroupSession) {
	if m.committing != nil {
		return
	}
	m.commitDue = false
	if m.failed || !m.txn.dirty {
		return
	}
	for _, t := range m.tables {
		t.store.Seal()
	}
	pc := &pendingCommit{txn: m.txn, start: time.Now(), done: make(chan error, 1)}
	m.txn = newTxnState()
	m.committing = pc
	go func() { pc.done <- m.commitTxn(sess, &pc.txn) }()
}

// awaitCommit waits for a running commit and finishes it.
func (m *member) awaitCommit() {
	if m.committing != nil {
		m.finishCommit(<-m.committing.done)
	}
}

// finishCommit ends a commit whose Kafka part reported err: on success it
// writes the sealed overlays to LevelDB with the changelog offsets they
// reached and sends the staged records; on failure it aborts.
func (m *member) finishCommit(err error) {
	pc := m.committing
	m.committing = nil
	if err != nil {
		m.abort(err)
		return
	}
	if !m.applySealed(pc) {
		return
	}
	staged := m.staged
	for _, msg := range staged {
		m.send(msg)
	}
	clear(staged)
	m.staged = staged[:0]
}

// awaitCommitted, for abort, waits for a running commit; if it succeeded,
// LevelDB gets its overlays (it would be correct without them too: a store
// records the changelog offset it holds, and the next owner restores the
// rest).
func (m *member) awaitCommitted() {
	if m.committing == nil {
		return
	}
	pc := m.committing
	m.committing = nil
	if err := <-pc.done; err == nil {
		m.applySealed(pc)
	}
}

// applySealed writes the committed transaction's overlays to LevelDB; false
// when that failed, which stops the member: the transaction is committed,
// the store is behind its stored changelog offset's data, and the next
// owner restores.
func (m *member) applySealed(pc *pendingCommit) bool {
	for p, t := range m.tables {
		if t.store.sealed == nil {
			continue
		}
		off, ok := pc.txn.next[p]
		if !ok {
			off = -1
		}
		if err := t.store.ApplySealed(off); err != nil {
			m.fatal = fmt.Errorf("partition %d: %w", p, err)
			m.failed = true
			m.cancelSession()
			return false
		}
		m.reportTable(p, t.store)
	}
	m.hooks.TxnCommitted(time.Since(pc.start), pc.txn.sent)
	return true
}

// commitTxn is the Kafka part of a commit, run by the pendingCommit's
// goroutine: it waits for t's records, adds the consumed offsets with the
// live session's group metadata and commits.
func (m *member) commitTxn(sess sarama.ConsumerGroupSession, t *txnState) error {
	m.flush(t)
	if t.err != nil {
		return t.err
	}
	if !m.beginTxn(t) { // only offsets to commit
		return t.err
	}
	if m.cfg.BeforeCommit != nil {
		if err := m.cfg.BeforeCommit(); err != nil {
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
		meta := sarama.NewConsumerGroupMetadataFromSession(sess, m.topo.Group, &m.memberName)
		if err := m.producer.AddOffsetsToTxnWithGroupMetadata(offsets, meta); err != nil {
			return fmt.Errorf("add offsets to transaction: %w", err)
		}
	}
	if err := m.producer.CommitTxn(); err != nil {
		return fmt.Errorf("commit transaction: %w", err)
	}
	return nil
}
