package txnproducer

import (
	"errors"
	"math"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// sendLoop sends rounds of batches until Input is closed and every queued
// record has its result. One round at a time: at most one produce request
// per broker is in flight, as an idempotent producer needs
// (Net.MaxOpenRequests = 1 in sarama), and a partition's next batch is sent
// only once its previous one has an answer, retries included.
func (p *Producer) sendLoop() {
	for {
		bs := p.acc.take()
		if bs == nil {
			return
		}
		p.round(bs)
	}
}

// round sends bs (at most one batch per partition) and delivers their
// results: it adds their new partitions to the transaction, assigns
// sequence numbers, sends one produce request per leader, and puts the
// batches that may be retried back in their queues.
func (p *Producer) round(bs []*batch) {
	if err := p.addNewPartitions(bs); err != nil {
		p.failRound(bs, p.fail(err))
		return
	}
	p.mu.Lock()
	if err := p.fatalErr; err != nil {
		p.mu.Unlock()
		p.failRound(bs, err)
		return
	}
	for _, b := range bs {
		p.seal(b)
	}
	p.mu.Unlock()

	byLeader := map[*sarama.Broker][]*batch{}
	results := make([]produceResult, 0, len(bs))
	for _, b := range bs {
		leader, err := p.client.Leader(b.tp.topic, b.tp.partition)
		if err != nil {
			var kerr sarama.KError
			if !errors.As(err, &kerr) { // no connection to the leader
				err = networkError{err}
			}
			results = append(results, produceResult{b: b, err: err})
			continue
		}
		byLeader[leader] = append(byLeader[leader], b)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for leader, lbs := range byLeader {
		wg.Go(func() {
			r := p.produce(leader, lbs)
			mu.Lock()
			results = append(results, r...)
			mu.Unlock()
		})
	}
	wg.Wait()

	var ok []produceResult
	var retry, failed []*batch
	var fatal error
	consider := func(b *batch, err error) {
		if retriable(err) && b.retries < p.conf.Producer.Retry.Max {
			b.retries++
			p.retried.Add(1)
			retry = append(retry, b)
			return
		}
		if fatal == nil {
			fatal = err
		}
		failed = append(failed, b)
	}
	for _, r := range results {
		if r.err == nil {
			ok = append(ok, r)
		} else {
			consider(r.b, r.err)
		}
	}
	if fatal != nil {
		fatal = p.fail(fatal)
	}
	p.mu.Lock()
	if fatal != nil {
		failed = append(append(failed, retry...), p.acc.drainLocked()...)
		retry = nil
	} else {
		p.acc.requeueLocked(retry)
	}
	p.sending = false
	p.idle.Broadcast()
	p.mu.Unlock()

	for _, r := range ok {
		for i, m := range r.b.msgs {
			if r.offset >= 0 {
				m.Offset = r.offset + int64(i)
			}
			p.succeeded(m)
		}
	}
	p.failBatches(failed, fatal)
	if len(retry) > 0 {
		_ = p.client.RefreshMetadata(topics(retry)...)
		time.Sleep(p.conf.Producer.Retry.Backoff)
		p.acc.signal()
	}
}

// seal gives b its sequence number on its first send; the caller holds
// p.mu. A retry keeps it: the broker drops a batch it already wrote.
func (p *Producer) seal(b *batch) {
	if b.seqSet {
		return
	}
	b.seqSet = true
	rb := b.rb
	rb.ProducerID, rb.ProducerEpoch = p.pid, p.epoch
	seq := p.seq[b.tp]
	rb.FirstSequence = seq
	n := int32(len(rb.Records))
	if seq > math.MaxInt32-n { // the broker wraps sequence numbers to 0 past MaxInt32
		p.seq[b.tp] = n - (math.MaxInt32 - seq) - 1
	} else {
		p.seq[b.tp] = seq + n
	}
	rb.LastOffsetDelta = n - 1
	var maxDelta time.Duration
	for i, r := range rb.Records {
		r.OffsetDelta = int64(i)
		maxDelta = max(maxDelta, r.TimestampDelta)
	}
	rb.MaxTimestamp = rb.FirstTimestamp.Add(maxDelta)
}

type produceResult struct {
	b      *batch
	offset int64
	err    error
}

// produce sends bs to their leader in one request.
func (p *Producer) produce(leader *sarama.Broker, bs []*batch) []produceResult {
	req := &sarama.ProduceRequest{
		TransactionalID: &p.id,
		RequiredAcks:    p.conf.Producer.RequiredAcks,
		Timeout:         int32(p.conf.Producer.Timeout / time.Millisecond),
		Version:         produceVersion(p.conf.Version),
	}
	for _, b := range bs {
		req.AddBatch(b.tp.topic, b.tp.partition, b.rb)
	}
	results := make([]produceResult, len(bs))
	res, err := p.send(leader, req)
	if err != nil {
		// The request may or may not have been written; a retry with the
		// same sequence numbers is dropped by the broker if it was.
		_ = leader.Close()
		for i, b := range bs {
			results[i] = produceResult{b: b, err: networkError{err}}
		}
		return results
	}
	for i, b := range bs {
		results[i] = produceResult{b: b}
		block := res.GetBlock(b.tp.topic, b.tp.partition)
		switch {
		case block == nil:
			results[i].err = sarama.ErrIncompleteResponse
		case block.Err == sarama.ErrNoError:
			results[i].offset = block.Offset
		case block.Err == sarama.ErrDuplicateSequenceNumber: // written by an earlier attempt
			results[i].offset = -1
		default:
			results[i].err = block.Err
		}
	}
	return results
}

// networkError is a produce request that got no answer.
type networkError struct{ err error }

func (e networkError) Error() string { return e.err.Error() }
func (e networkError) Unwrap() error { return e.err }

// retriable says a batch that failed with err may be sent again as it is.
func retriable(err error) bool {
	var ne networkError
	if errors.As(err, &ne) || errors.Is(err, sarama.ErrIncompleteResponse) {
		return true
	}
	var kerr sarama.KError
	if !errors.As(err, &kerr) {
		return false
	}
	switch kerr {
	case sarama.ErrNotLeaderForPartition, sarama.ErrLeaderNotAvailable, sarama.ErrRequestTimedOut,
		sarama.ErrNotEnoughReplicas, sarama.ErrNotEnoughReplicasAfterAppend, sarama.ErrUnknownTopicOrPartition,
		sarama.ErrKafkaStorageError, sarama.ErrNetworkException, sarama.ErrFencedLeaderEpoch,
		sarama.ErrUnknownLeaderEpoch, sarama.ErrReplicaNotAvailable:
		return true
	}
	return false
}

func topics(bs []*batch) []string {
	seen := map[string]bool{}
	var ts []string
	for _, b := range bs {
		if !seen[b.tp.topic] {
			seen[b.tp.topic] = true
			ts = append(ts, b.tp.topic)
		}
	}
	return ts
}

// failRound answers a round's batches and everything queued with err.
func (p *Producer) failRound(bs []*batch, err error) {
	p.mu.Lock()
	bs = append(bs, p.acc.drainLocked()...)
	p.sending = false
	p.idle.Broadcast()
	p.mu.Unlock()
	p.failBatches(bs, err)
}

func (p *Producer) failBatches(bs []*batch, err error) {
	for _, b := range bs {
		for _, m := range b.msgs {
			p.failed(m, err)
		}
	}
}

// succeeded and failed deliver a record's result, if Producer.Return asks
// for it.
func (p *Producer) succeeded(m *sarama.ProducerMessage) {
	if p.conf.Producer.Return.Successes {
		p.successes <- m
	}
}

func (p *Producer) failed(m *sarama.ProducerMessage, err error) {
	if p.conf.Producer.Return.Errors {
		p.errors <- &sarama.ProducerError{Msg: m, Err: err}
	}
}

// produceVersion is the ProduceRequest version sarama's producer uses for v.
func produceVersion(v sarama.KafkaVersion) int16 {
	switch {
	case v.IsAtLeast(sarama.V3_7_0_0):
		return 10
	case v.IsAtLeast(sarama.V2_8_0_0):
		return 9
	case v.IsAtLeast(sarama.V2_4_0_0):
		return 8
	case v.IsAtLeast(sarama.V2_1_0_0):
		return 7
	case v.IsAtLeast(sarama.V2_0_0_0):
		return 6
	case v.IsAtLeast(sarama.V1_0_0_0):
		return 5
	default:
		return 3
	}
}
