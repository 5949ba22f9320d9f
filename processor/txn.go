package processor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/kafkautil"
	"github.com/dedupkit/dedup/internal/resources"
)

// transaction is the member's side that writes: the transactional producer,
// the open transaction, and the previous one while it commits. The loop owns
// it during a session, except that a running commit's goroutine has the
// producer (commit.go).
type transaction struct {
	producerCfg *sarama.Config
	producer    sarama.AsyncProducer
	// maxRecord is the largest record the producer sends (recordLimit). The
	// broker refusing a record as too large means a topic's
	// max.message.bytes was lowered since it was read: abort sets
	// limitStale, and run reads the limits again before the next producer,
	// so the event is dead-lettered when it comes again instead of
	// aborting every transaction that holds it.
	maxRecord  int
	limitStale bool

	state txnState // the open transaction
	// committing is the previous transaction while its commit runs
	// (commit.go); staged holds the records produced meanwhile, and
	// commitDue says the commit interval ended meanwhile.
	committing *pendingCommit
	staged     []*sarama.ProducerMessage
	commitDue  bool
	commitTick <-chan time.Time // the loop's commit interval
	failed     bool             // the session's transaction was aborted: ignore the rest

	// resources are the stores outside Kafka that the session's handlers
	// joined through handlerCtx (dedup.JoinResource); they commit just
	// before each Kafka commit (commitTxn), and what they hold when the
	// session ends uncommitted is rolled back (loop).
	resources  *resources.Set
	handlerCtx context.Context
}

// txnState is the open transaction's bookkeeping, owned by the loop. Records
// are streamed into the transaction as the callback emits them (the async
// producer batches and sends them while the loop goes on processing), so a
// commit only waits for the last acknowledgements, the offsets and EndTxn.
type txnState struct {
	open    bool                       // BeginTxn was called for this transaction
	sent    int                        // records handed to the producer
	acked   int                        // of those, acknowledged or failed
	err     error                      // first produce error: the transaction must abort
	next    map[int32]int64            // changelog partition -> offset after its last record
	offsets map[string]map[int32]int64 // consumed: topic -> partition -> next offset
	dirty   bool                       // something to commit
}

func newTxnState() txnState {
	return txnState{next: map[int32]int64{}, offsets: map[string]map[int32]int64{}}
}

// send streams msg into the open transaction, beginning it if needed. While
// waiting for room in the producer's input it takes acknowledgements, so the
// producer never blocks on a full Successes channel while the loop blocks on
// Input.
func (m *member) send(msg *sarama.ProducerMessage) {
	if m.tx.committing != nil { // held back until the last transaction committed
		m.tx.staged = append(m.tx.staged, msg)
		return
	}
	if !m.tx.beginTxn(&m.tx.state) {
		return
	}
	// Fast path: a select with a default is a plain non-blocking send; the
	// three-way select below locks all three channels on every call (it
	// was a twentieth of the worker's CPU, sending two records per event).
	select {
	case m.tx.producer.Input() <- msg:
		m.tx.state.sent++
		return
	default:
	}
	for {
		select {
		case m.tx.producer.Input() <- msg:
			m.tx.state.sent++
			return
		case s := <-m.tx.producer.Successes():
			m.acked(&m.tx.state, s)
		case e := <-m.tx.producer.Errors():
			m.nacked(&m.tx.state, e)
		}
	}
}

// beginTxn makes sure a transaction is open; false (with txn.err set) when
// the producer refuses.
func (tx *transaction) beginTxn(t *txnState) bool {
	if t.open {
		return true
	}
	// A session that ended with nothing to commit leaves its (empty)
	// transaction open in the producer; carry on with it.
	if tx.producer.TxnStatus()&sarama.ProducerTxnFlagInTransaction == 0 {
		if err := tx.producer.BeginTxn(); err != nil {
			t.err = fmt.Errorf("begin transaction: %w", err)
			return false
		}
	}
	t.open = true
	return true
}

func (m *member) acked(t *txnState, msg *sarama.ProducerMessage) {
	t.acked++
	if msg.Topic == m.tableTopic {
		t.next[msg.Partition] = max(t.next[msg.Partition], msg.Offset+1)
	}
}

func (m *member) nacked(t *txnState, e *sarama.ProducerError) {
	t.acked++
	if t.err == nil {
		t.err = fmt.Errorf("produce to %s: %w", e.Msg.Topic, e.Err)
	}
}

// flush waits until every record sent in the transaction is acknowledged or
// failed. sarama's CommitTxn and AbortTxn wait for in-flight records too, but
// they would deadlock once more acknowledgements are due than the Successes
// channel holds, because the loop is the one reading it.
func (m *member) flush(t *txnState) {
	for t.acked < t.sent {
		select {
		case s := <-m.tx.producer.Successes():
			m.acked(t, s)
		case e := <-m.tx.producer.Errors():
			m.nacked(t, e)
		}
	}
}

// fencingErrors mean another member or instance owns the work now.
var fencingErrors = []error{
	sarama.ErrProducerFenced, sarama.ErrUnknownMemberId, sarama.ErrIllegalGeneration,
	sarama.ErrFencedInstancedId, sarama.ErrInvalidProducerEpoch, sarama.ErrInvalidProducerIDMapping,
}

// isTooLarge says the broker refused a record or batch for its size.
func isTooLarge(err error) bool {
	return errors.Is(err, sarama.ErrMessageSizeTooLarge) || errors.Is(err, sarama.ErrMessageSetSizeTooLarge)
}

func isFencing(err error) bool {
	for _, f := range fencingErrors {
		if errors.Is(err, f) {
			return true
		}
	}
	return false
}

// describe is err for the log, with what PRODUCER_FENCED means: an
// instance that was cut off from the brokers past the transaction timeout
// meets it when it comes back. It stays an error, so the member's logger
// (kafkautil.NamingLogger) names its Kafka codes: sarama has no text for
// PRODUCER_FENCED (90).
func describe(err error) error {
	if errors.Is(err, sarama.ErrProducerFenced) {
		return fmt.Errorf("%w (this producer's epoch is stale; the coordinator aborted "+
			"its transaction after the transaction timeout, or another instance took over)", err)
	}
	return err
}

// abort ends a failed transaction: AbortTxn when the producer allows it,
// otherwise (fatal state, or the abort itself failed, as for a fenced
// producer) the producer is replaced before the member rejoins. An injected
// crash skips all of that, like a killed process.
func (m *member) abort(cause error) {
	m.awaitCommitted() // the producer is the loop's again
	m.tx.failed = true
	clear(m.tx.staged)
	m.tx.staged = m.tx.staged[:0]
	for _, t := range m.tables.byPartition {
		t.store.Drop()
	}
	defer m.session.cancelSession()

	var c *crash
	if errors.As(cause, &c) {
		m.session.fatal = c
		m.tx.state = newTxnState()
		return
	}
	if fenced := fencedInstance(cause, m.memberName, m.topo.Group); fenced != nil {
		defer func() { m.session.fatal = fenced }()
	}
	if isTooLarge(cause) {
		// The next producer is made with the limits read again (run).
		m.tx.limitStale = true
		defer m.replaceProducer()
	}
	if kafkautil.Refused(cause) {
		// A missing ACL (WRITE on an output topic, say): the member stops
		// once the transaction is aborted; a retry would fail the same way.
		defer func() { m.session.fatal = cause }()
	}
	fenced := isFencing(cause)
	reason := "error"
	switch {
	case fenced:
		reason = "fenced"
		m.hooks.Fenced()
	case errors.Is(cause, dedup.ErrInterrupted):
		reason = "interrupted"
	}
	m.hooks.TxnAborted(reason)
	m.health.aborted()
	if reason == "interrupted" {
		m.log.Info("handler interrupted, aborting the transaction", "err", cause)
	} else {
		m.log.Warn("transaction failed, aborting", "err", describe(cause), "fenced", fenced)
	}
	m.flush(&m.tx.state)
	m.tx.state = newTxnState()
	status := m.tx.producer.TxnStatus()
	if status&sarama.ProducerTxnFlagFatalError != 0 {
		m.log.Warn("producer in fatal state, replacing it", "status", status.String())
		m.replaceProducer()
		return
	}
	if status&sarama.ProducerTxnFlagInTransaction != 0 || status&sarama.ProducerTxnFlagAbortableError != 0 {
		if err := m.tx.producer.AbortTxn(); err != nil {
			m.log.Warn("abort failed, replacing the producer", "err", describe(err))
			m.replaceProducer()
		}
	}
}

// replaceProducer closes the producer; run makes a new one before rejoining.
func (m *member) replaceProducer() {
	m.tx.closeProducer()
}

func (tx *transaction) closeProducer() {
	if tx.producer != nil {
		tx.producer.Close()
		tx.producer = nil
	}
}

// channels are the producer's and the running commit's channels the loop
// waits on. Acknowledgements are taken whenever they come, so the producer
// never waits on the loop; none come once the session failed, and while a
// commit runs its goroutine takes them.
func (tx *transaction) channels() (<-chan *sarama.ProducerMessage, <-chan *sarama.ProducerError, <-chan error) {
	switch {
	case tx.committing != nil:
		return nil, nil, tx.committing.done
	case !tx.failed:
		return tx.producer.Successes(), tx.producer.Errors(), nil
	}
	return nil, nil, nil
}
