package loadgen

import (
	"context"
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
	prod, err := sarama.NewAsyncProducer(brokers, ProducerConfig())
	if err != nil {
		return fmt.Errorf("loadgen producer: %w", err)
	}
	n := p.Len()
	acked := make(chan error, 1)
	go func() { // owns Successes and Errors until both close
		var first error
		count := 0
		succ, errs := prod.Successes(), prod.Errors()
		for succ != nil || errs != nil {
			select {
			case _, ok := <-succ:
				if !ok {
					succ = nil
					continue
				}
				count++
			case e, ok := <-errs:
				if !ok {
					errs = nil
					continue
				}
				if first == nil {
					first = e.Err
				}
			}
		}
		if first == nil && count != n {
			first = fmt.Errorf("%d of %d records acknowledged", count, n)
		}
		acked <- first
	}()
	sendErr := send(ctx, prod, topic, p, rate)
	prod.AsyncClose()
	ackErr := <-acked
	if sendErr != nil {
		return sendErr
	}
	if ackErr != nil {
		return fmt.Errorf("produce to %s: %w", topic, ackErr)
	}
	return nil
}

func send(ctx context.Context, prod sarama.AsyncProducer, topic string, p *Plan, rate float64) error {
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
					return ctx.Err()
				case <-tick.C:
				}
			}
		}
		msg := &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(p.Key(i)),
			Value:   sarama.ByteEncoder(p.Value(i)),
			Headers: []sarama.RecordHeader{{Key: []byte(HeaderRecord), Value: RecordHeader(i)}}}
		select {
		case prod.Input() <- msg:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
