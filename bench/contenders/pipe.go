package contenders

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/kafkautil"
)

// stage is the per-message work of a pipe contender: the dedup check and the
// handler. It reports whether the message is to be forwarded to the output.
// It is called from every partition's goroutine at once.
type stage interface {
	Process(ctx context.Context, msg *sarama.ConsumerMessage) (forward bool, err error)
}

// passThrough is the raw pipe: no state, every record is forwarded.
type passThrough struct{}

func (passThrough) Process(context.Context, *sarama.ConsumerMessage) (bool, error) { return true, nil }

// pipeConsumerConfig is the input side of the pipe contenders: a consumer
// group from the oldest offset, offsets auto-committed every commit interval
// (only offsets marked after the output was acknowledged: at-least-once).
func pipeConsumerConfig(cfg Config) *sarama.Config {
	c := sarama.NewConfig()
	c.Version = kafkautil.SaramaVersion
	c.ClientID = "bench-" + string(cfg.Kind)
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.Offsets.AutoCommit.Enable = true
	c.Consumer.Offsets.AutoCommit.Interval = cfg.CommitInterval
	c.Consumer.IsolationLevel = sarama.ReadCommitted
	c.Consumer.Return.Errors = true
	return c
}

// pipeProducerConfig is the output side: acks=all, key hash partitioning.
func pipeProducerConfig(cfg Config) *sarama.Config {
	c := sarama.NewConfig()
	c.Version = kafkautil.SaramaVersion
	c.ClientID = "bench-" + string(cfg.Kind)
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Return.Successes = true
	c.Producer.Return.Errors = true
	c.Producer.Partitioner = sarama.NewHashPartitioner
	return c
}

// pipe is a consumer group member that runs a stage per message and sends
// the forwarded ones to an async producer; an input offset is marked once
// every record before it was skipped or acknowledged.
type pipe struct {
	cfg   Config
	st    stage
	prod  sarama.AsyncProducer
	ready func()
	once  sync.Once
	fail  func(error)

	mu       sync.Mutex
	trackers map[int32]*tracker // of the current session
}

func runPipe(ctx context.Context, cfg Config, st stage, ready func()) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	prod, err := sarama.NewAsyncProducer(cfg.Brokers, pipeProducerConfig(cfg))
	if err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	group, err := sarama.NewConsumerGroup(cfg.Brokers, cfg.Group, pipeConsumerConfig(cfg))
	if err != nil {
		prod.Close()
		return fmt.Errorf("consumer group: %w", err)
	}
	p := &pipe{cfg: cfg, st: st, prod: prod, ready: ready, fail: cancel}
	return serve(ctx, cancel, cfg, group, prod, p, p.drainSuccesses)
}

// serve runs handler's sessions of group until ctx ends, then closes the
// group and the producer. A produce error ends the run (cancel) and is
// returned; drainSuccesses reads prod's Successes until it is closed.
func serve(ctx context.Context, cancel context.CancelCauseFunc, cfg Config, group sarama.ConsumerGroup,
	prod sarama.AsyncProducer, handler sarama.ConsumerGroupHandler, drainSuccesses func()) error {
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); drainSuccesses() }()
	go func() {
		defer wg.Done()
		for e := range prod.Errors() {
			cancel(fmt.Errorf("produce to %s: %w", e.Msg.Topic, e.Err))
		}
	}()
	go func() {
		defer wg.Done()
		for e := range group.Errors() {
			cfg.Logger.Warn("consumer group", "err", e)
		}
	}()
	for ctx.Err() == nil {
		if err := group.Consume(ctx, []string{cfg.Input}, handler); err != nil && ctx.Err() == nil {
			cfg.Logger.Warn("group session failed, rejoining", "err", err)
			time.Sleep(time.Second)
		}
	}
	errs := []error{group.Close(), prod.Close()}
	wg.Wait()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		errs = append(errs, cause)
	}
	return errors.Join(errs...)
}

func (p *pipe) drainSuccesses() {
	for msg := range p.prod.Successes() {
		a := msg.Metadata.(ack)
		a.t.finish(a.offset)
	}
}

// ack rides on a produced message back to its input offset.
type ack struct {
	t      *tracker
	offset int64
}

func (p *pipe) Setup(sess sarama.ConsumerGroupSession) error {
	p.mu.Lock()
	p.trackers = map[int32]*tracker{}
	for _, part := range sess.Claims()[p.cfg.Input] {
		p.trackers[part] = &tracker{sess: sess, topic: p.cfg.Input, partition: part}
	}
	p.mu.Unlock()
	p.once.Do(p.ready)
	return nil
}

// Cleanup waits until the in-flight records are acknowledged, so the last
// offsets are marked before the session commits them.
func (p *pipe) Cleanup(sarama.ConsumerGroupSession) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		busy := false
		p.mu.Lock()
		for _, t := range p.trackers {
			busy = busy || t.inFlight() > 0
		}
		p.mu.Unlock()
		if !busy {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return errors.New("in-flight records not acknowledged within 30s")
}

func (p *pipe) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	p.mu.Lock()
	t := p.trackers[claim.Partition()]
	p.mu.Unlock()
	ctx := sess.Context()
	for msg := range claim.Messages() {
		t.add(msg.Offset)
		forward, err := p.st.Process(ctx, msg)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			err = fmt.Errorf("%s/%d@%d: %w", msg.Topic, msg.Partition, msg.Offset, err)
			p.fail(err)
			return err
		}
		if !forward {
			t.finish(msg.Offset)
			continue
		}
		out := &sarama.ProducerMessage{Topic: p.cfg.Output, Key: sarama.ByteEncoder(msg.Key),
			Value: sarama.ByteEncoder(msg.Value), Metadata: ack{t: t, offset: msg.Offset}}
		for _, h := range msg.Headers {
			out.Headers = append(out.Headers, sarama.RecordHeader{Key: h.Key, Value: h.Value})
		}
		select {
		case p.prod.Input() <- out:
		case <-ctx.Done():
			return nil
		}
	}
	return nil
}

// tracker marks a partition's offsets in order: an offset is marked once it
// and every offset before it are finished (skipped or acknowledged).
type tracker struct {
	sess      sarama.ConsumerGroupSession
	topic     string
	partition int32

	mu      sync.Mutex
	pending []entry // in offset order
}

type entry struct {
	offset int64
	done   bool
}

func (t *tracker) add(off int64) {
	t.mu.Lock()
	t.pending = append(t.pending, entry{offset: off})
	t.mu.Unlock()
}

func (t *tracker) finish(off int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := sort.Search(len(t.pending), func(i int) bool { return t.pending[i].offset >= off })
	if i == len(t.pending) || t.pending[i].offset != off {
		return // from a previous session
	}
	t.pending[i].done = true
	n := 0
	for n < len(t.pending) && t.pending[n].done {
		n++
	}
	if n > 0 {
		t.sess.MarkOffset(t.topic, t.partition, t.pending[n-1].offset+1, "")
		t.pending = t.pending[n:]
	}
}

func (t *tracker) inFlight() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending)
}
