// Package txnproducer is a transactional Kafka producer with sarama's
// AsyncProducer interface and a shorter path from Input to the broker.
//
// sarama's async producer passes every record through four goroutines
// (dispatcher, topic, partition and broker producers) and a channel
// between each, and its transaction manager holds one lock across every
// AddPartitionsToTxn round trip that each partition's goroutine takes for
// every record. With --rekey=never that pipeline is a large share of the
// worker's CPU. Here a record takes one
// channel to a goroutine that appends it to its partition's batch, and one
// goroutine (the sender) sends the batches, adding new partitions to the
// transaction first: the same requests, without the per-record hops.
//
// What it keeps from sarama: the client (metadata, connections, TLS, SASL,
// coordinators), the request and response types, the Config fields a
// transactional producer reads, the status flags and the errors. What it
// does differently: a produce error it cannot retry makes the producer
// fatal (TxnStatus has ProducerTxnFlagFatalError), so its user replaces it;
// the next producer's InitProducerId aborts the open transaction and bumps
// the epoch, which resets the sequence numbers a failed batch left behind.
// sarama tries to keep the producer with an abortable error instead.
package txnproducer

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/IBM/sarama"
)

// ErrUnsupported is returned by the AsyncProducer methods this producer
// does not implement (AddMessageToTxn: consumed offsets are added with
// AddOffsetsToTxnWithGroupMetadata).
var ErrUnsupported = errors.New("txnproducer: not supported")

// Producer is a transactional producer. Use it as a sarama.AsyncProducer:
// BeginTxn, records on Input, their results on Successes and Errors (one
// each), AddOffsetsToTxnWithGroupMetadata, then CommitTxn or AbortTxn once
// every record's result was read.
type Producer struct {
	client sarama.Client
	conf   *sarama.Config
	id     string // transactional ID

	input     chan *sarama.ProducerMessage
	successes chan *sarama.ProducerMessage
	errors    chan *sarama.ProducerError

	acc  *accumulator
	done chan struct{} // closed when the goroutines ended

	// mu guards the transaction state below; the sender and the control
	// calls (BeginTxn, CommitTxn, ...) share it.
	mu       sync.Mutex
	idle     *sync.Cond // signalled when the sender finished a round
	sending  bool       // the sender is in a round
	ending   bool       // EndTxn is in flight: no round starts
	pid      int64
	epoch    int16
	status   sarama.ProducerTxnStatusFlag
	fatalErr error
	inTxn    map[topicPartition]bool
	offsets  bool // offsets were added to the open transaction
	seq      map[topicPartition]int32

	closeOnce sync.Once
	retried   atomic.Int64 // batches sent again, for tests
	// send sends a produce request to its leader; tests replace it to lose
	// requests or their answers.
	send func(leader *sarama.Broker, req *sarama.ProduceRequest) (*sarama.ProduceResponse, error)
	// taking, when set, runs before the accumulator takes each record from
	// Input; tests use it to leave records in Input's buffer.
	taking func()
}

type topicPartition struct {
	topic     string
	partition int32
}

// Options are the producer's settings that sarama.Config has no field for.
type Options struct {
	// MaxQueued is how many records may wait for the sender before Input
	// blocks; 0 is DefaultMaxQueued. At the start of each transaction the
	// sender waits until the coordinator wrote the previous one's markers
	// (AddPartitionsToTxn answers CONCURRENT_TRANSACTIONS meanwhile), and
	// records queue up. The worker's member keeps the default: it holds a
	// committing transaction's successors itself, and a larger bound raises
	// its peak memory for no more throughput. A loop that stops to commit
	// and then sends a burst gains from more: sarama's async producer queues
	// without bound.
	MaxQueued int
}

// New connects to brokers with conf and initialises the transactional ID
// conf.Producer.Transaction.ID (InitProducerId, which aborts a transaction
// a previous incarnation left open).
func New(brokers []string, conf *sarama.Config) (*Producer, error) {
	return NewWith(brokers, conf, Options{})
}

// NewWith is New with opts.
func NewWith(brokers []string, conf *sarama.Config, opts Options) (*Producer, error) {
	if opts.MaxQueued < 0 {
		return nil, fmt.Errorf("txnproducer: Options.MaxQueued %d must not be negative", opts.MaxQueued)
	}
	if opts.MaxQueued == 0 {
		opts.MaxQueued = DefaultMaxQueued
	}
	p, err := open(brokers, conf, opts)
	if err != nil {
		return nil, err
	}
	p.start()
	return p, nil
}

// open is NewWith without starting the goroutines, so tests can set hooks.
func open(brokers []string, conf *sarama.Config, opts Options) (*Producer, error) {
	if conf.Producer.Transaction.ID == "" || !conf.Producer.Idempotent {
		return nil, fmt.Errorf("txnproducer: Producer.Transaction.ID and Producer.Idempotent are required")
	}
	if err := conf.Validate(); err != nil {
		return nil, err
	}
	client, err := sarama.NewClient(brokers, conf)
	if err != nil {
		return nil, err
	}
	p := &Producer{
		client:    client,
		conf:      conf,
		id:        conf.Producer.Transaction.ID,
		input:     make(chan *sarama.ProducerMessage, conf.ChannelBufferSize),
		successes: make(chan *sarama.ProducerMessage, conf.ChannelBufferSize),
		errors:    make(chan *sarama.ProducerError, conf.ChannelBufferSize),
		done:      make(chan struct{}),
		inTxn:     map[topicPartition]bool{},
		seq:       map[topicPartition]int32{},
		status:    sarama.ProducerTxnFlagUninitialized,
		send:      (*sarama.Broker).Produce,
	}
	p.idle = sync.NewCond(&p.mu)
	if err := p.initProducerID(); err != nil {
		_ = client.Close()
		return nil, err
	}
	p.status = sarama.ProducerTxnFlagReady
	p.acc = newAccumulator(p, opts.MaxQueued)
	return p, nil
}

// start runs the accumulator and the sender; Close stops them.
func (p *Producer) start() {
	var wg sync.WaitGroup
	wg.Go(p.acc.run)
	wg.Go(p.sendLoop)
	go func() {
		wg.Wait()
		close(p.successes)
		close(p.errors)
		_ = p.client.Close()
		close(p.done)
	}()
}

func (p *Producer) Input() chan<- *sarama.ProducerMessage     { return p.input }
func (p *Producer) Successes() <-chan *sarama.ProducerMessage { return p.successes }
func (p *Producer) Errors() <-chan *sarama.ProducerError      { return p.errors }
func (p *Producer) IsTransactional() bool                     { return true }
func (p *Producer) AddMessageToTxn(*sarama.ConsumerMessage, string, *string) error {
	return ErrUnsupported
}
func (p *Producer) AddMessageToTxnWithGroupMetadata(*sarama.ConsumerMessage, *sarama.ConsumerGroupMetadata, *string) error {
	return ErrUnsupported
}

var _ sarama.AsyncProducer = (*Producer)(nil)

// TxnStatus is the transaction's state, with sarama's flags.
func (p *Producer) TxnStatus() sarama.ProducerTxnStatusFlag {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

// BeginTxn opens a transaction; records may be sent from now on.
func (p *Producer) BeginTxn() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.statusErrLocked(sarama.ProducerTxnFlagReady); err != nil {
		return err
	}
	p.status = sarama.ProducerTxnFlagInTransaction
	return nil
}

// AddOffsetsToTxnWithGroupMetadata adds consumed offsets to the open
// transaction (AddOffsetsToTxn, then TxnOffsetCommit with the group's
// generation and member, so the group coordinator refuses a zombie's).
func (p *Producer) AddOffsetsToTxnWithGroupMetadata(offsets map[string][]*sarama.PartitionOffsetMetadata, meta *sarama.ConsumerGroupMetadata) error {
	if err := p.inTransaction(); err != nil {
		return err
	}
	if err := p.addOffsets(offsets, meta); err != nil {
		return p.fail(err)
	}
	p.mu.Lock()
	p.offsets = true
	p.mu.Unlock()
	return nil
}

func (p *Producer) AddOffsetsToTxn(offsets map[string][]*sarama.PartitionOffsetMetadata, groupID string) error {
	return p.AddOffsetsToTxnWithGroupMetadata(offsets, sarama.NewConsumerGroupMetadata(groupID))
}

// CommitTxn commits the open transaction once every record sent before it
// was answered. With Producer.Return.Successes, their results must be read
// meanwhile (the sender waits for room on Successes).
func (p *Producer) CommitTxn() error { return p.endTxn(true) }

// AbortTxn aborts the open transaction, once its records were answered.
func (p *Producer) AbortTxn() error { return p.endTxn(false) }

func (p *Producer) endTxn(commit bool) error {
	if err := p.inTransaction(); err != nil {
		return err
	}
	// Records still in Input's buffer belong to this transaction too.
	mark := &inputMark{reached: make(chan struct{})}
	p.input <- &sarama.ProducerMessage{Metadata: mark}
	<-mark.reached
	p.mu.Lock()
	for p.sending || p.acc.pending() {
		p.idle.Wait()
	}
	if p.fatalErr != nil {
		defer p.mu.Unlock()
		return p.fatalErr
	}
	added := len(p.inTxn) > 0 || p.offsets
	p.ending = true // a record sent meanwhile waits for the next transaction
	p.mu.Unlock()
	defer p.acc.signal()
	var err error
	if added { // a transaction with nothing in it is unknown to the coordinator
		err = p.sendEndTxn(commit)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ending = false
	if err != nil {
		p.mu.Unlock()
		err = p.fail(err)
		p.mu.Lock()
		return err
	}
	clear(p.inTxn)
	p.offsets = false
	p.status = sarama.ProducerTxnFlagReady
	return nil
}

func (p *Producer) inTransaction() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.statusErrLocked(sarama.ProducerTxnFlagInTransaction)
}

// statusErrLocked is the error of a call that needs the status want: the
// fatal error, or ErrTransactionNotReady. The caller holds p.mu.
func (p *Producer) statusErrLocked(want sarama.ProducerTxnStatusFlag) error {
	if p.fatalErr != nil {
		return p.fatalErr
	}
	if p.status&want == 0 {
		return sarama.ErrTransactionNotReady
	}
	return nil
}

// fail makes the producer fatal with err, unless it is already, and returns
// the error it is fatal with.
func (p *Producer) fail(err error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fatalErr == nil {
		p.fatalErr = err
		p.status = sarama.ProducerTxnFlagInError | sarama.ProducerTxnFlagFatalError
		if p.acc.roomWait != nil { // Input waits for room: answer it with the error
			close(p.acc.roomWait)
			p.acc.roomWait = nil
		}
	}
	return p.fatalErr
}

// AsyncClose stops the producer; Successes and Errors are closed once every
// record taken has its result.
func (p *Producer) AsyncClose() {
	p.closeOnce.Do(func() { close(p.input) })
}

// Close stops the producer and waits for it, reading the results nobody
// read; it returns the errors among them.
func (p *Producer) Close() error {
	p.AsyncClose()
	go func() {
		for range p.successes {
		}
	}()
	var errs sarama.ProducerErrors
	for e := range p.errors {
		errs = append(errs, e)
	}
	<-p.done
	if len(errs) > 0 {
		return errs
	}
	return nil
}
