package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/assign"
	"github.com/dedupkit/dedup/internal/engine"
	"github.com/dedupkit/dedup/internal/kafkautil"
	"github.com/dedupkit/dedup/internal/txnproducer"
)

// member is one consumer-group member with its transactional producer.
// Between Setup and Cleanup of a session, one goroutine (loop) owns the
// stores, the queued records and the offsets: it processes messages one at a
// time and seals a transaction for commit between them, so every commit is
// at a message boundary of every partition the member owns. While a sealed
// transaction commits, its goroutine has the producer and writes the stores'
// LevelDB (commit.go).
type member struct {
	cfg        *Config
	topo       *dedup.Topology
	hooks      hookList
	log        *slog.Logger
	memberName string // transactional.id and static group instance id
	tableTopic string // the changelog, named once
	loopTopic  string // <group>-loop, named once (not per looped event)
	partitions int32  // of the inputs and the loop topic (copartitioned)

	client sarama.Client // restore reads
	group  sarama.ConsumerGroup
	health memberHealth

	session sessionState // the claim side (session.go)
	tables  tableSet     // the claimed partitions' tables, once restored
	tx      transaction  // the write side (txn.go, commit.go)
	bg      background   // the Processor's work beside the loops
}

// tableSet holds the restored partitions' tables; the loop owns them. mu
// guards the map (not the tables) against Lookup from HTTP handlers: the
// loop adds a partition's table once it is restored, and Setup and Cleanup
// reset the map, so the loop reads it without the lock.
type tableSet struct {
	mu          sync.RWMutex
	byPartition map[int32]*partitionTable
}

// background is the work of the Processor's that its members take part in
// beside their loops: the stores kept between sessions, the pacing of key
// filter builds, the standbys, and the watches that abort a dead
// instance's transactions.
type background struct {
	// kept are the stores of the last sessions of the Processor's members,
	// open, with nothing uncommitted in them: Setup hands each claimed
	// partition's to its restore and closes the others this member kept
	// (session.go).
	kept *keptStores
	// scans paces the Processor's background key filter builds
	// (scanpace.go); holdingScans: this member holds them.
	scans        *scanPacer
	holdingScans atomic.Bool
	// preopened is closed once the stores noted for the Processor's members
	// are open (preopen.go); nil: none are opened at start.
	preopened chan struct{}
	// standby and strategy, with Config.Group.StandbyReplicas: the Processor's
	// standbys and this member's assignment strategy, which says which it
	// holds (standby.go); lastProbe is the member's latest warm-up rejoin
	// (unix nanos).
	standby   *standbyTasks
	strategy  *assign.Member
	lastProbe atomic.Int64
	// stuck is the Processor's watch of stuck transactions, which the
	// member's loop claims wake when they are blocked (stuck.go); nil: off.
	stuck *stuckWatch
	// peers is the Processor's watch of the other instances' liveness,
	// told of each session start (peerwatch.go); nil: off.
	peers *peerWatch
}

// sessionState is the member's claim side: its group session, the
// restores that bring the claimed partitions' tables up, and the channels
// and calls of the loop that processes them. Setup makes what is per
// session; Setup, Cleanup and run share one goroutine (sarama's Consume
// calls both).
type sessionState struct {
	cancelSession context.CancelFunc
	ready         atomic.Bool
	fatal         error // set by the loop; read by run after Consume returned
	// rebalanceStart is when the member last stopped processing: its first
	// join, or the Cleanup of a revoked or failed session; the session's
	// restores report the time from there until every claimed partition is
	// ready again (session.go).
	rebalanceStart time.Time
	owned          atomic.Int32 // partitions claimed in the current session
	// resume is which claimed partitions have not processed again since
	// Setup; the hold on the background work ends with it (resume.go).
	resume resumeWatch
	// restores are the session's restores by partition, made by Setup and
	// read-only until Cleanup; restoring counts their goroutines.
	restores  map[int32]*partitionRestore
	restoring sync.WaitGroup
	adopt     chan *partitionTable // a restored partition for the loop to own

	// Owned by the loop goroutine during a session.
	calls   *calls         // handler calls started and not finished (calls.go)
	standIn *standIn       // the loop's stand-in inside a call (standin.go)
	inline  flight         // the record being processed with Concurrency 1
	in      chan []inbound // batches of one claim's messages
	stop    chan struct{}
	done    chan struct{}
}

// inbound is a consumed message with what its claim's goroutine worked out
// for it ahead of the loop (see prepare).
type inbound struct {
	msg      *sarama.ConsumerMessage
	prep     *engine.Prepared
	progress *claimProgress // of msg's claim (lag.go)
}

// crash is an injected fault: the member stops dead, without aborting.
type crash struct{ err error }

func (c *crash) Error() string { return "injected crash: " + c.err.Error() }

// topics are what the member consumes: every input and the loop topic, all
// co-partitioned with the table, so a member that claims partition p of one
// claims it of all (the group's copartitioning strategy, internal/assign) and
// one store serves them; except that a member warming a table up may claim
// its inputs first (session.go's claimedTables).
func (m *member) topics() []string { return append(slices.Clone(m.topo.Inputs), m.loopTopic) }

// run joins the group and processes until ctx is done or a fatal error.
// After an aborted transaction the session is ended and Consume is called
// again, so the member rejoins and resumes from the committed offsets.
func (m *member) run(ctx context.Context) error {
	defer m.tx.closeProducer()
	defer m.closeKept()
	if m.bg.standby != nil {
		defer m.bg.standby.closeAll(m)
	}
	for ctx.Err() == nil {
		if m.tx.producer == nil {
			if m.tx.limitStale {
				if err := m.refreshRecordLimit(ctx); err != nil {
					return err
				}
			}
			if err := m.newProducer(ctx); err != nil {
				return err
			}
		}
		sessCtx, cancel := context.WithCancel(ctx)
		m.session.cancelSession = cancel
		if m.session.rebalanceStart.IsZero() {
			m.session.rebalanceStart = time.Now()
		}
		err := m.group.Consume(sessCtx, m.topics(), m)
		cancel()
		if m.session.fatal != nil {
			return m.session.fatal
		}
		if fenced := fencedInstance(err, m.memberName, m.topo.Group); fenced != nil { // the join itself
			return fenced
		}
		if errors.Is(err, sarama.ErrClosedConsumerGroup) {
			return err
		}
		if kafkautil.Refused(err) { // e.g. no READ on the group: rejoining fails the same way
			return fmt.Errorf("group %s: %w", m.topo.Group, err)
		}
		if err != nil && ctx.Err() == nil {
			m.log.Warn("group session failed, rejoining", "err", err)
			sleep(ctx, time.Second)
		}
	}
	return nil
}

func (m *member) newProducer(ctx context.Context) error {
	for {
		p, err := txnproducer.New(m.cfg.Brokers, m.tx.producerCfg)
		if err == nil {
			m.tx.producer = p
			return nil
		}
		if kafkautil.Refused(err) { // e.g. no WRITE on the transactional ID
			return fmt.Errorf("transactional producer %s: %w", m.memberName, err)
		}
		m.log.Warn("transactional producer init failed, retrying", "transactionalId", m.memberName, "err", err)
		if !sleep(ctx, time.Second) {
			return ctx.Err()
		}
	}
}

// refreshRecordLimit reads the topics' max.message.bytes again and sizes
// the next producer's batches to them.
func (m *member) refreshRecordLimit(ctx context.Context) error {
	limit, _, err := recordLimit(ctx, m.cfg, m.topo) // unread topics were named at start
	if err != nil {
		return fmt.Errorf("read max.message.bytes again after the broker refused a record as too large: %w", err)
	}
	m.tx.limitStale = false
	if limit != m.tx.maxRecord {
		m.log.Warn("a topic's max.message.bytes changed while running: events whose records do not fit are dead-lettered as "+
			dedup.ReasonTooLarge, "was", m.tx.maxRecord, "now", limit)
		m.tx.maxRecord = limit
		m.tx.producerCfg.Producer.MaxMessageBytes = limit
	}
	return nil
}

// handBatch bounds the messages a claim hands to the loop at once.
const handBatch = 64

// ConsumeClaim prepares the claim's messages and hands them to the loop in
// batches: a message and whatever else the claim has buffered, up to
// handBatch: one channel operation and at most one wake-up of the loop per
// batch instead of per message, because a loop woken per message spends
// much of its time waiting for the Go scheduler.
func (m *member) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	var keys headerKeys // this goroutine's own: interning is not shared
	progress := m.claimProgress(claim)
	defer m.watchLag(claim, progress)()
	defer m.watchBlocked(claim, progress)()
	done := sess.Context().Done()
	// Nothing of the partition reaches the loop before its table: the
	// restore handed the table to the loop before it ended (session.go).
	// An input partition whose table another member holds has no restore:
	// the loop forwards its events to that member (process).
	var early []*sarama.ConsumerMessage
	if r := m.session.restores[claim.Partition()]; r != nil {
		var ok bool
		if early, ok = m.awaitRestore(claim, r, done); !ok {
			return nil // the session ended, or the restore failed and ended it
		}
	}
	m.session.resume.started(claim, progress)
	for len(early) > 0 {
		n := min(handBatch, len(early))
		batch := make([]inbound, 0, n)
		for _, msg := range early[:n] {
			batch = append(batch, m.prepare(&keys, msg).of(progress))
		}
		early = early[n:]
		if !m.hand(sess, batch) {
			return nil
		}
	}
	for {
		var batch []inbound
		select {
		case msg, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			batch = append(make([]inbound, 0, handBatch), m.prepare(&keys, msg).of(progress))
		case <-done:
			return nil
		}
		more := true // the claim may have more buffered
		for more && len(batch) < handBatch {
			select {
			case msg, ok := <-claim.Messages():
				if more = ok; ok {
					batch = append(batch, m.prepare(&keys, msg).of(progress))
				}
			default:
				more = false
			}
		}
		if !m.hand(sess, batch) {
			return nil
		}
	}
}

// prepare does what needs no table on the claim's goroutine, one per
// partition, instead of in the loop, the one goroutine that owns the tables
// and commits: the key and header conversions and the topology's Prepare
// (the envelope decode), a large part of an event's cost in the loop
// (BenchmarkProcess/prepare against /rekey-owned), so the loop's time goes
// to the table.
func (m *member) prepare(keys *headerKeys, msg *sarama.ConsumerMessage) inbound {
	return inbound{msg: msg, prep: engine.Prepare(m.topo, dedup.Record{Topic: msg.Topic, Partition: msg.Partition, Offset: msg.Offset,
		Timestamp: msg.Timestamp, Key: string(msg.Key), Headers: keys.headers(msg.Headers), Value: msg.Value})}
}

// hand queues a batch for the loop; false when the session ended first.
func (m *member) hand(sess sarama.ConsumerGroupSession, in []inbound) bool {
	select { // the non-blocking send first: no locking of both channels
	case m.session.in <- in:
		return true
	default:
	}
	select {
	case m.session.in <- in:
		return true
	case <-sess.Context().Done():
		return false
	}
}

func (m *member) loop(sess sarama.ConsumerGroupSession) {
	defer close(m.session.done)
	tick := time.NewTicker(m.cfg.Transactions.CommitInterval)
	defer tick.Stop()
	m.tx.commitTick = tick.C
	if m.session.calls.limit == 1 {
		defer m.startStandIn(sess)()
	}
	sweepTick := time.NewTicker(m.cfg.Sweep.Interval)
	defer sweepTick.Stop()
	sweepMore := false
	// The records that waited through the rebalance commit as soon as the
	// session has taken some, not up to a commit interval later: the
	// partitions that did not move are then held up by the rebalance alone.
	first := true
	for {
		acks, nacks, committed := m.tx.channels()
		select {
		case t := <-m.session.adopt:
			m.tables.own(t)
		case batch := <-m.session.in:
			m.handleBatch(sess, batch)
			m.handleQueued(sess)
			if first && m.tx.state.dirty {
				first = false
				m.commit(sess)
			}
		case f := <-m.session.calls.results:
			m.callReturned(sess, f)
		case s := <-acks:
			m.acked(&m.tx.state, s)
		case e := <-nacks:
			m.nacked(&m.tx.state, e)
		case err := <-committed:
			m.committedTxn(sess, err)
		case <-tick.C:
			if sweepMore && !m.tx.failed {
				sweepMore = m.sweep(time.Now())
			}
			m.commit(sess)
			m.releaseScansOnceResumed()
		case <-sweepTick.C:
			if !m.tx.failed {
				sweepMore = m.sweep(time.Now())
			}
		case <-m.session.stop:
			// The session's context is done: running calls return as
			// interrupted (or done, if their handler finished first).
			m.awaitCalls(sess, func() bool { return m.session.calls.running == 0 })
			close(m.session.calls.jobs) // the workers end
			m.commitAndWait(sess)
			// Whatever a resource holds now belongs to events no
			// committed transaction holds: they come again.
			m.tx.resources.Rollback()
			return
		}
	}
}

// committedTxn ends the running commit, and starts the next if one fell due
// meanwhile.
func (m *member) committedTxn(sess sarama.ConsumerGroupSession, err error) {
	m.finishCommit(err)
	if m.tx.commitDue {
		m.startCommit(sess)
	}
}

// drainMax is how many queued batches the loop takes in a row.
const drainMax = 4

// handleQueued handles up to drainMax batches already queued, with
// non-blocking receives instead of the loop's full select, which locks every
// channel it waits on. Bounded, so acknowledgements and the commit tick still
// come in between.
func (m *member) handleQueued(sess sarama.ConsumerGroupSession) {
	for range drainMax {
		select {
		case batch := <-m.session.in:
			m.handleBatch(sess, batch)
		default:
			return
		}
	}
}

func (m *member) handleBatch(sess sarama.ConsumerGroupSession, batch []inbound) {
	m.health.consumed(time.Now(), batch)
	for _, in := range batch {
		m.handle(sess, in)
	}
	if last := batch[len(batch)-1]; !m.tx.failed && last.progress != nil { // a batch is one claim's
		last.progress.next.Store(last.msg.Offset + 1)
	}
}

// handle processes one message and ends the transaction when it failed or
// is full.
func (m *member) handle(sess sarama.ConsumerGroupSession, in inbound) {
	if m.tx.failed {
		return
	}
	m.process(sess, in)
	m.settle(sess)
	// A batch of events of milliseconds each is seconds: the commit
	// interval is kept between them too, not only between batches, and a
	// commit that ended meanwhile is finished.
	if m.tx.committing != nil {
		select {
		case err := <-m.tx.committing.done:
			m.committedTxn(sess, err)
		default:
		}
	}
	select {
	case <-m.tx.commitTick:
		m.commit(sess)
	default:
	}
}

// settle ends the transaction after an event when it failed or is full.
func (m *member) settle(sess sarama.ConsumerGroupSession) {
	switch {
	case m.tx.failed:
	case m.tx.state.err != nil:
		m.abort(m.tx.state.err)
	case m.tx.state.sent+len(m.tx.staged) >= m.cfg.Transactions.MaxBatch:
		m.commitFull(sess)
	}
}

// queue streams a record into the open transaction.
func (m *member) queue(topic, key string, value []byte, headers []sarama.RecordHeader) {
	m.send(newRecord(topic, key, value, headers))
}

// queueChangelog streams a record of the table partition's changelog.
func (m *member) queueChangelog(partition int32, key string, value []byte) {
	msg := newRecord(m.tableTopic, key, value, nil)
	msg.Partition, msg.Metadata = partition, manualPartition{}
	m.send(msg)
}

// queueLoop streams a record to the loop topic's given partition: the
// partition of its key, which LoopTable computes too (txnContext.Loopback),
// or the partition number of the message it forwards (txnContext.Forward).
func (m *member) queueLoop(partition int32, key string, value []byte, headers []sarama.RecordHeader) {
	msg := newRecord(m.loopTopic, key, value, headers)
	msg.Partition, msg.Metadata = partition, manualPartition{}
	m.send(msg)
}

// record is a produced record with its key and value encoders in one
// allocation: as separate interface values they cost two more per record
// (BenchmarkProcess/norekey reports the allocations per event).
type record struct {
	msg   sarama.ProducerMessage
	key   sarama.StringEncoder
	value sarama.ByteEncoder
}

func newRecord(topic, key string, value []byte, headers []sarama.RecordHeader) *sarama.ProducerMessage {
	r := &record{key: sarama.StringEncoder(key), value: value}
	r.msg = sarama.ProducerMessage{Topic: topic, Key: &r.key, Headers: headers}
	if value != nil {
		r.msg.Value = &r.value
	}
	return &r.msg
}
