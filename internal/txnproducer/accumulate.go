package txnproducer

import (
	"fmt"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/kafkautil"
)

// What a batch adds around its records, as sarama counts it
// (record_batch.go), and the accumulator's bounds. A record's own overhead is
// kafkautil.RecordOverhead, the one the topology's size check counts with.
const (
	batchOverhead       = 49
	DefaultMaxQueued    = 4 << 10 // Input waits while this many are queued (Options.MaxQueued)
	maxRecordsPerBatch  = 8192    // a batch past this starts another
	defaultFlushRecords = 1000
)

// accumulator takes records from Input and appends them to their
// partition's batch. It shares the producer's lock with the sender, which
// takes the batches.
type accumulator struct {
	p *Producer

	// Guarded by p.mu.
	queued   map[topicPartition][]*batch // each partition's batches, oldest first
	records  int                         // records queued
	oldest   time.Time                   // arrival of the oldest queued record
	closing  bool                        // Input was closed
	roomWait chan struct{}               // closed when records fall below maxQueued

	wake chan struct{} // tells the sender to look again (capacity 1)

	maxQueued int

	// The run goroutine's own.
	partitioners map[string]sarama.Partitioner
	partitions   map[string]int32
}

// batch is one partition's records for one produce request.
type batch struct {
	tp      topicPartition
	msgs    []*sarama.ProducerMessage
	rb      *sarama.RecordBatch
	bytes   int
	seqSet  bool // rb.FirstSequence assigned
	retries int
}

func newAccumulator(p *Producer, maxQueued int) *accumulator {
	return &accumulator{
		p:            p,
		maxQueued:    maxQueued,
		queued:       map[topicPartition][]*batch{},
		wake:         make(chan struct{}, 1),
		partitioners: map[string]sarama.Partitioner{},
		partitions:   map[string]int32{},
	}
}

// run appends Input's records until Input is closed.
func (a *accumulator) run() {
	for {
		if a.p.taking != nil {
			a.p.taking()
		}
		msg, ok := <-a.p.input
		if !ok {
			break
		}
		if m, ok := msg.Metadata.(*inputMark); ok {
			close(m.reached)
			continue
		}
		a.add(msg)
	}
	a.p.mu.Lock()
	a.closing = true
	a.p.mu.Unlock()
	a.signal()
}

// inputMark is sent through Input by endTxn: once the accumulator reached
// it, every record sent before it is queued.
type inputMark struct{ reached chan struct{} }

func (a *accumulator) signal() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// add queues msg, or answers it with an error on Errors when the producer
// is fatal or the record cannot be sent.
func (a *accumulator) add(msg *sarama.ProducerMessage) {
	rec, size, err := a.record(msg)
	if err != nil {
		if !a.p.conf.Producer.Return.Errors { // nobody would hear of it: the commit must fail
			a.p.fail(err)
		}
		a.p.failed(msg, err)
		return
	}
	p := a.p
	p.mu.Lock()
	for p.fatalErr == nil && a.records >= a.maxQueued {
		if a.roomWait == nil {
			a.roomWait = make(chan struct{})
		}
		w := a.roomWait
		p.mu.Unlock()
		<-w
		p.mu.Lock()
	}
	if err := p.fatalErr; err != nil {
		p.mu.Unlock()
		p.failed(msg, err)
		return
	}
	tp := topicPartition{msg.Topic, msg.Partition}
	bs := a.queued[tp]
	var b *batch
	// A batch is full once its records reach Producer.MaxMessageBytes, as
	// sarama counts (wouldOverflow); its first record always fits.
	if n := len(bs); n > 0 && bs[n-1].bytes+size < p.conf.Producer.MaxMessageBytes &&
		len(bs[n-1].msgs) < maxRecordsPerBatch && !bs[n-1].seqSet {
		b = bs[n-1]
	} else {
		b = &batch{tp: tp, bytes: batchOverhead, rb: &sarama.RecordBatch{
			Version:          2,
			Codec:            p.conf.Producer.Compression,
			CompressionLevel: p.conf.Producer.CompressionLevel,
			FirstTimestamp:   msg.Timestamp,
			IsTransactional:  true,
		}}
		a.queued[tp] = append(bs, b)
	}
	rec.TimestampDelta = msg.Timestamp.Sub(b.rb.FirstTimestamp)
	b.rb.Records = append(b.rb.Records, rec)
	b.msgs = append(b.msgs, msg)
	b.bytes += size
	a.records++
	first := a.records == 1
	if first {
		a.oldest = time.Now()
	}
	full := a.records == a.flushRecords()
	p.mu.Unlock()
	if first || full {
		a.signal()
	}
}

func (a *accumulator) flushRecords() int {
	if n := a.p.conf.Producer.Flush.Messages; n > 0 {
		return n
	}
	return defaultFlushRecords
}

// record encodes msg and picks its partition; size is what it adds to a
// batch at most.
func (a *accumulator) record(msg *sarama.ProducerMessage) (*sarama.Record, int, error) {
	if err := a.partition(msg); err != nil {
		return nil, 0, err
	}
	rec := &sarama.Record{}
	var err error
	if msg.Key != nil {
		if rec.Key, err = msg.Key.Encode(); err != nil {
			return nil, 0, err
		}
	}
	if msg.Value != nil {
		if rec.Value, err = msg.Value.Encode(); err != nil {
			return nil, 0, err
		}
	}
	size := kafkautil.RecordOverhead + len(rec.Key) + len(rec.Value)
	if len(msg.Headers) > 0 {
		rec.Headers = make([]*sarama.RecordHeader, len(msg.Headers))
		for i := range msg.Headers {
			rec.Headers[i] = &msg.Headers[i]
			size += len(msg.Headers[i].Key) + len(msg.Headers[i].Value) + kafkautil.HeaderOverhead
		}
	}
	if size > a.p.conf.Producer.MaxMessageBytes {
		return nil, 0, sarama.ErrMessageSizeTooLarge
	}
	if msg.Timestamp.IsZero() {
		msg.Timestamp = time.Now()
	}
	msg.Timestamp = msg.Timestamp.Truncate(time.Millisecond)
	return rec, size, nil
}

// partition sets msg.Partition with the configured partitioner.
func (a *accumulator) partition(msg *sarama.ProducerMessage) error {
	pt, ok := a.partitioners[msg.Topic]
	if !ok {
		pt = a.p.conf.Producer.Partitioner(msg.Topic)
		a.partitioners[msg.Topic] = pt
	}
	n, ok := a.partitions[msg.Topic]
	if !ok {
		parts, err := a.p.client.Partitions(msg.Topic)
		if err != nil {
			return fmt.Errorf("partitions of %s: %w", msg.Topic, err)
		}
		n = int32(len(parts))
		a.partitions[msg.Topic] = n
	}
	if n == 0 {
		return sarama.ErrLeaderNotAvailable
	}
	part, err := pt.Partition(msg, n)
	if err != nil {
		return err
	}
	if part < 0 || part >= n {
		return sarama.ErrInvalidPartition
	}
	msg.Partition = part
	return nil
}

// pending says records are queued; the caller holds p.mu.
func (a *accumulator) pending() bool { return a.records > 0 }

// take waits until queued records are due (flushRecords of them, one of
// them older than the linger, or Input closed) and takes the oldest batch
// of each partition for a round; nil once Input is closed and nothing is
// queued. The sender is marked sending before the lock is let go, so
// endTxn never sees records neither queued nor in a round.
func (a *accumulator) take() []*batch {
	p := a.p
	linger := p.conf.Producer.Flush.Frequency
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		p.mu.Lock()
		due := a.records > 0 && !p.ending && (a.closing || a.records >= a.flushRecords() || time.Since(a.oldest) >= linger)
		if due {
			bs := a.takeLocked()
			p.sending = true
			p.mu.Unlock()
			return bs
		}
		if a.closing && a.records == 0 {
			p.mu.Unlock()
			return nil
		}
		var fire <-chan time.Time
		if a.records > 0 && !p.ending {
			wait := linger - time.Since(a.oldest)
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			fire = timer.C
		}
		p.mu.Unlock()
		select {
		case <-a.wake:
		case <-fire:
		}
	}
}

func (a *accumulator) takeLocked() []*batch {
	bs := make([]*batch, 0, len(a.queued))
	for tp, q := range a.queued {
		b := q[0]
		if len(q) == 1 {
			delete(a.queued, tp)
		} else {
			a.queued[tp] = q[1:]
		}
		a.records -= len(b.msgs)
		bs = append(bs, b)
	}
	if a.records > 0 {
		a.oldest = time.Now() // the rest waits at most one more linger
	}
	a.roomLocked()
	return bs
}

// requeueLocked puts batches to retry back in front of their partitions'
// queues, in the order they were sent.
func (a *accumulator) requeueLocked(bs []*batch) {
	for _, b := range bs {
		a.queued[b.tp] = append([]*batch{b}, a.queued[b.tp]...)
		if a.records == 0 {
			a.oldest = time.Now()
		}
		a.records += len(b.msgs)
	}
}

// drainLocked takes every queued batch (the producer is fatal).
func (a *accumulator) drainLocked() []*batch {
	var bs []*batch
	for tp, q := range a.queued {
		bs = append(bs, q...)
		delete(a.queued, tp)
	}
	a.records = 0
	a.roomLocked()
	return bs
}

func (a *accumulator) roomLocked() {
	if a.roomWait != nil && a.records < a.maxQueued {
		close(a.roomWait)
		a.roomWait = nil
	}
}
