package contenders

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/txnproducer"
)

// The transactional pipe is the raw pipe made exactly-once by Kafka
// transactions alone: read_committed input, records written by a
// transactional producer, the input offsets committed in the same
// transaction every commit interval. It keeps no state, so the input's
// duplicates pass through (counted per record, like the raw pipe). It
// writes through the worker's transactional producer (internal/txnproducer),
// so its CPU per event is what the transactions cost: the worker's beyond it
// is the dedup table's (the lookup, the changelog record, LevelDB). Its loop
// stops for each commit, which the worker's does not, so it does not bound
// the worker's rate. The raw pipe writes through sarama's async producer.
// One goroutine owns the producer and the offsets, and commits between
// messages. With Config.Changelog it also writes the worker's second record
// per event (more exactly, per input record: it keeps no state, so
// duplicates get one too): the worker's Kafka traffic without its table.
type txnPipe struct {
	cfg   Config
	prod  sarama.AsyncProducer
	ready func()
	once  sync.Once
	fail  func(error)

	in   chan *sarama.ConsumerMessage
	stop chan struct{}
	done chan struct{}
}

func txnPipeConfig(cfg Config) (consumer, producer *sarama.Config) {
	consumer = pipeConsumerConfig(cfg)
	consumer.Consumer.Offsets.AutoCommit.Enable = false
	producer = pipeProducerConfig(cfg)
	producer.Producer.Idempotent = true
	producer.Producer.Transaction.ID = "bench-" + cfg.Group
	producer.Producer.Return.Successes = false // CommitTxn waits for every record
	producer.Producer.Flush.Messages = 1000    // as the worker's producer
	producer.Producer.Flush.Frequency = 5 * time.Millisecond
	producer.Net.MaxOpenRequests = 1
	return consumer, producer
}

func runTxnPipe(ctx context.Context, cfg Config, ready func()) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	consumerCfg, producerCfg := txnPipeConfig(cfg)
	// The loop stops to commit and then sends a burst; a deep queue keeps it
	// from waiting on the next transaction's AddPartitionsToTxn, as sarama's
	// unbounded one did.
	prod, err := txnproducer.NewWith(cfg.Brokers, producerCfg, txnproducer.Options{MaxQueued: 64 << 10})
	if err != nil {
		return fmt.Errorf("transactional producer: %w", err)
	}
	group, err := sarama.NewConsumerGroup(cfg.Brokers, cfg.Group, consumerCfg)
	if err != nil {
		prod.Close()
		return fmt.Errorf("consumer group: %w", err)
	}
	p := &txnPipe{cfg: cfg, prod: prod, ready: ready, fail: cancel}
	return serve(ctx, cancel, cfg, group, prod, p, func() {
		for range prod.Successes() { // not enabled: closed by prod.Close
		}
	})
}

func (p *txnPipe) Setup(sess sarama.ConsumerGroupSession) error {
	p.in, p.stop, p.done = make(chan *sarama.ConsumerMessage, 256), make(chan struct{}), make(chan struct{})
	go p.loop(sess)
	p.once.Do(p.ready)
	return nil
}

// Cleanup commits what the loop holds and stops it.
func (p *txnPipe) Cleanup(sarama.ConsumerGroupSession) error {
	close(p.stop)
	<-p.done
	return nil
}

func (p *txnPipe) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		select {
		case p.in <- msg:
		case <-sess.Context().Done():
			return nil
		}
	}
	return nil
}

func (p *txnPipe) loop(sess sarama.ConsumerGroupSession) {
	defer close(p.done)
	tick := time.NewTicker(p.cfg.CommitInterval)
	defer tick.Stop()
	offsets := map[int32]int64{}
	inTxn := false
	for {
		select {
		case msg := <-p.in:
			if !inTxn {
				if err := p.prod.BeginTxn(); err != nil {
					p.fail(fmt.Errorf("begin transaction: %w", err))
					return
				}
				inTxn = true
			}
			out := &sarama.ProducerMessage{Topic: p.cfg.Output, Key: sarama.ByteEncoder(msg.Key), Value: sarama.ByteEncoder(msg.Value)}
			for _, h := range msg.Headers {
				out.Headers = append(out.Headers, sarama.RecordHeader{Key: h.Key, Value: h.Value})
			}
			p.prod.Input() <- out
			if p.cfg.Changelog != "" {
				p.prod.Input() <- changelogRecord(p.cfg.Changelog, msg)
			}
			offsets[msg.Partition] = msg.Offset + 1
		case <-tick.C:
			if inTxn && !p.commit(sess, offsets) {
				return
			}
			inTxn = false
		case <-p.stop:
			if inTxn {
				p.commit(sess, offsets)
			}
			return
		}
	}
}

// seenSize is about the size of the worker's seen record (codecs.SeenRecord
// of a bench event: two times, the aggregate ID, the topic, the position).
const seenSize = 64

// changelogRecord stands in for the worker's changelog record of msg: a key
// the length of an event ID, unique per input record, and a seen-record-sized
// value. Built without decoding the event, which is the worker's own work.
func changelogRecord(topic string, msg *sarama.ConsumerMessage) *sarama.ProducerMessage {
	key := make([]byte, 0, 40)
	key = append(key, "evt-"...)
	key = strconv.AppendInt(key, int64(msg.Partition), 10)
	key = append(key, '-')
	key = strconv.AppendInt(key, msg.Offset, 10)
	key = append(key, "-0000000000000000000000"...)
	return &sarama.ProducerMessage{Topic: topic, Key: sarama.ByteEncoder(key), Value: sarama.ByteEncoder(make([]byte, seenSize))}
}

// commit adds the input offsets to the transaction and commits it; false
// (after failing the contender) when either is refused.
func (p *txnPipe) commit(sess sarama.ConsumerGroupSession, offsets map[int32]int64) bool {
	var parts []*sarama.PartitionOffsetMetadata
	for part, off := range offsets {
		parts = append(parts, &sarama.PartitionOffsetMetadata{Partition: part, Offset: off})
	}
	clear(offsets)
	if len(parts) > 0 {
		meta := sarama.NewConsumerGroupMetadataFromSession(sess, p.cfg.Group, nil)
		if err := p.prod.AddOffsetsToTxnWithGroupMetadata(map[string][]*sarama.PartitionOffsetMetadata{p.cfg.Input: parts}, meta); err != nil {
			p.fail(fmt.Errorf("add offsets to transaction: %w", err))
			return false
		}
	}
	if err := p.prod.CommitTxn(); err != nil {
		p.fail(fmt.Errorf("commit transaction: %w", err))
		return false
	}
	return true
}
