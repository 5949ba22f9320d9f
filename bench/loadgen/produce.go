package loadgen

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/kafkautil"
)

// ProducerConfig is the load generator's client: acks=all, keyed by hash
// like every Kafka client, small lingering so a paced run sends promptly.
func ProducerConfig() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = kafkautil.SaramaVersion
	c.ClientID = "dedup-bench-loadgen"
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Return.Successes = true
	c.Producer.Return.Errors = true
	c.Producer.Partitioner = sarama.NewHashPartitioner
	c.Producer.Flush.Frequency = 2 * time.Millisecond
	c.Producer.Flush.Messages = 500
	c.ChannelBufferSize = 4096
	return c
}

// Produce writes the plan's records [0, len) to topic, in order per
// partition. rate is records per second; 0 means as fast as possible. It
// returns once every record was acknowledged.
func Produce(ctx context.Context, brokers []string, topic string, p *Plan, rate float64) error {
	_, err := produce(ctx, brokers, topic, p, rate)
	return err
}

// ProduceUntil writes the plan's records like Produce until stop is done or
// the plan ends, and returns how many records it wrote: the plan's first n,
// every one acknowledged. A load that runs for as long as a measurement
// takes (the failover benchmark) stops this way and checks the outputs of
// those n records only.
func ProduceUntil(stop context.Context, brokers []string, topic string, p *Plan, rate float64) (int, error) {
	n, err := produce(stop, brokers, topic, p, rate)
	if err != nil && errors.Is(err, context.Canceled) && stop.Err() != nil {
		return n, nil
	}
	return n, err
}

// produce returns how many records it handed to the producer and whether all
// of them were acknowledged.
func produce(ctx context.Context, brokers []string, topic string, p *Plan, rate float64) (int, error) {
	prod, err := sarama.NewAsyncProducer(brokers, ProducerConfig())
	if err != nil {
		return 0, fmt.Errorf("loadgen producer: %w", err)
	}
	type acks struct {
		count int
		err   error
	}
	acked := make(chan acks, 1)
	go func() { // owns Successes and Errors until both close
		var a acks
		succ, errs := prod.Successes(), prod.Errors()
		for succ != nil || errs != nil {
			select {
			case _, ok := <-succ:
				if !ok {
					succ = nil
					continue
				}
				a.count++
			case e, ok := <-errs:
				if !ok {
					errs = nil
					continue
				}
				if a.err == nil {
					a.err = e.Err
				}
			}
		}
		acked <- a
	}()
	sent, sendErr := send(ctx, prod, topic, p, rate)
	prod.AsyncClose()
	a := <-acked
	if a.err == nil && a.count != sent {
		a.err = fmt.Errorf("%d of %d records acknowledged", a.count, sent)
	}
	if a.err != nil {
		return sent, fmt.Errorf("produce to %s: %w", topic, a.err)
	}
	return sent, sendErr
}

// send hands the plan's records to prod, paced at rate, and returns how
// many it handed over.
func send(ctx context.Context, prod sarama.AsyncProducer, topic string, p *Plan, rate float64) (int, error) {
	start := time.Now()
	var tick *time.Ticker
	if rate > 0 {
		tick = time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
	}
	for i := 0; i < p.Len(); i++ {
		if tick != nil {
			for float64(i) >= rate*time.Since(start).Seconds() {
				select {
				case <-ctx.Done():
					return i, ctx.Err()
				case <-tick.C:
				}
			}
		}
		msg := &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(p.Key(i)), Value: sarama.ByteEncoder(p.Value(i)),
			Headers: []sarama.RecordHeader{{Key: []byte(HeaderRecord), Value: RecordHeader(i)}}}
		select {
		case prod.Input() <- msg:
		case <-ctx.Done():
			return i, ctx.Err()
		}
	}
	return p.Len(), nil
}
