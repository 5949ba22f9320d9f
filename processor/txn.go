package processor

import (
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// commit sends the queued records, adds the consumed offsets with the live
// session's group metadata and commits, all in one transaction. Only after
// the commit succeeded are the overlays written to LevelDB. Any failure
// aborts: nothing of the transaction survives, and the session is ended so
// the member resumes from the committed offsets.
func (m *member) commit(sess sarama.ConsumerGroupSession) {
	if m.failed || !m.dirty {
		return
	}
	start := time.Now()
	if err := m.commitTxn(sess); err != nil {
		m.abort(err)
		return
	}
	next := map[int32]int64{}
	for _, msg := range m.pending {
		if msg.Topic == m.topo.TableTopic() {
			next[msg.Partition] = max(next[msg.Partition], msg.Offset+1)
		}
	}
	for p, s := range m.stores {
		if !s.Dirty() {
			continue
		}
		off, ok := next[p]
		if !ok {
			off = -1
		}
		if err := s.Apply(off); err != nil {
			// The transaction is committed; the store is behind its stored
			// changelog offset's data, so stop: the next owner restores.
			m.fatal = fmt.Errorf("partition %d: %w", p, err)
			m.failed = true
			m.cancelSession()
			return
		}
		m.hooks.TableSize(p, s.entries)
	}
	m.hooks.TxnCommitted(time.Since(start), len(m.pending))
	m.pending, m.offsets, m.dirty = m.pending[:0], map[string]map[int32]int64{}, false
}

func (m *member) commitTxn(sess sarama.ConsumerGroupSession) error {
	if err := m.producer.BeginTxn(); err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	if len(m.pending) > 0 {
		if err := m.producer.SendMessages(m.pending); err != nil {
			return fmt.Errorf("produce %d records: %w", len(m.pending), err)
		}
	}
	if m.cfg.BeforeCommit != nil {
		if err := m.cfg.BeforeCommit(); err != nil {
			return &crash{err}
		}
	}
	offsets := make(map[string][]*sarama.PartitionOffsetMetadata, len(m.offsets))
	for topic, parts := range m.offsets {
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

// fencingErrors mean another member or instance owns the work now.
var fencingErrors = []error{
	sarama.ErrProducerFenced, sarama.ErrUnknownMemberId, sarama.ErrIllegalGeneration,
	sarama.ErrFencedInstancedId, sarama.ErrInvalidProducerEpoch, sarama.ErrInvalidProducerIDMapping,
}

func isFencing(err error) bool {
	for _, f := range fencingErrors {
		if errors.Is(err, f) {
			return true
		}
	}
	return false
}

// abort ends a failed transaction: AbortTxn when the producer allows it,
// otherwise (fatal state, or the abort itself failed, as for a fenced
// producer) the producer is replaced before the member rejoins. An injected
// crash skips all of that, like a killed process.
func (m *member) abort(cause error) {
	m.failed = true
	for _, s := range m.stores {
		s.Drop()
	}
	m.pending, m.offsets, m.dirty = nil, map[string]map[int32]int64{}, false
	defer m.cancelSession()

	var c *crash
	if errors.As(cause, &c) {
		m.fatal = c
		return
	}
	fenced := isFencing(cause)
	reason := "error"
	if fenced {
		reason = "fenced"
		m.hooks.Fenced()
	}
	m.hooks.TxnAborted(reason)
	m.log.Warn("transaction failed, aborting", "err", cause, "fenced", fenced)
	status := m.producer.TxnStatus()
	if status&sarama.ProducerTxnFlagFatalError != 0 {
		m.log.Warn("producer in fatal state, replacing it", "status", status.String())
		m.replaceProducer()
		return
	}
	if status&sarama.ProducerTxnFlagInTransaction != 0 || status&sarama.ProducerTxnFlagAbortableError != 0 {
		if err := m.producer.AbortTxn(); err != nil {
			m.log.Warn("abort failed, replacing the producer", "err", err)
			m.replaceProducer()
		}
	}
}

// replaceProducer closes the producer; run makes a new one before rejoining.
func (m *member) replaceProducer() {
	m.closeProducer()
}
