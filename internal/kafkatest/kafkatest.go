// Package kafkatest has the few Kafka client steps shared by the demo and the
// integration tests: create a topic, produce records, read a topic back
// read_committed until a condition holds.
package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/kafkautil"
)

// Record is a Kafka record as the tests see it.
type Record struct {
	Key     string
	Value   []byte
	Headers map[string][]byte
	// HeaderList is the headers in order, repeated keys included: ReadAll
	// fills it, and Produce writes it after Headers.
	HeaderList []sarama.RecordHeader
	Partition  int32
	Offset     int64
}

// Config is the client configuration the helpers use.
func Config() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = kafkautil.SaramaVersion
	c.ClientID = "dedup-kafkatest"
	c.Producer.Return.Successes = true
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Partitioner = sarama.NewHashPartitioner
	c.Consumer.IsolationLevel = sarama.ReadCommitted
	c.Consumer.Return.Errors = true
	c.Metadata.Retry.Max = 10
	return c
}

// CreateTopic creates topic with the broker's default replication factor.
func CreateTopic(brokers []string, topic string, partitions int32) error {
	return CreateTopicWith(brokers, topic, partitions, nil)
}

// CreateTopicWith is CreateTopic with topic configs (cleanup.policy=..., say).
func CreateTopicWith(brokers []string, topic string, partitions int32, config map[string]string) error {
	admin, err := sarama.NewClusterAdmin(brokers, Config())
	if err != nil {
		return err
	}
	defer admin.Close()
	detail := &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: -1, ConfigEntries: map[string]*string{}}
	for k, v := range config {
		detail.ConfigEntries[k] = &v
	}
	err = admin.CreateTopic(topic, detail, false)
	if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	// Wait until the topic is in the metadata a worker will ask for.
	deadline := time.Now().Add(30 * time.Second)
	for {
		meta, err := admin.DescribeTopics([]string{topic})
		if err == nil && len(meta) == 1 && meta[0].Err == sarama.ErrNoError && len(meta[0].Partitions) == int(partitions) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topic %s not visible 30 s after creation", topic)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// DeleteTopics deletes topics; one that does not exist is not an error.
func DeleteTopics(brokers []string, topics ...string) error {
	admin, err := sarama.NewClusterAdmin(brokers, Config())
	if err != nil {
		return err
	}
	defer admin.Close()
	var errs []error
	for _, topic := range topics {
		if err := admin.DeleteTopic(topic); err != nil && !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			errs = append(errs, fmt.Errorf("delete topic %s: %w", topic, err))
		}
	}
	return errors.Join(errs...)
}

// Produce writes recs in order (keyed records go to the key's hash
// partition) and returns them with partitions and offsets filled in.
func Produce(brokers []string, topic string, recs []Record) ([]Record, error) {
	return produce(brokers, topic, recs, Config())
}

// ProduceTo is Produce into each record's Partition, as a producer whose
// partitioner is not the key hash the worker loops by (a Java client's
// murmur2, a custom one) would.
func ProduceTo(brokers []string, topic string, recs []Record) ([]Record, error) {
	c := Config()
	c.Producer.Partitioner = sarama.NewManualPartitioner
	return produce(brokers, topic, recs, c)
}

func produce(brokers []string, topic string, recs []Record, c *sarama.Config) ([]Record, error) {
	p, err := sarama.NewSyncProducer(brokers, c)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	out := make([]Record, len(recs))
	for i, r := range recs {
		msg := &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(r.Key), Partition: r.Partition}
		if r.Value != nil {
			msg.Value = sarama.ByteEncoder(r.Value)
		}
		for k, v := range r.Headers {
			msg.Headers = append(msg.Headers, sarama.RecordHeader{Key: []byte(k), Value: v})
		}
		msg.Headers = append(msg.Headers, r.HeaderList...)
		part, off, err := p.SendMessage(msg)
		if err != nil {
			return nil, fmt.Errorf("produce record %d to %s: %w", i, topic, err)
		}
		r.Partition, r.Offset = part, off
		out[i] = r
	}
	return out, nil
}

// EndOffsets returns, for every partition of topic, the offset after its
// last committed record: the high-water mark for plain topics, and below the
// trailing transaction markers for transactional ones. A group that has
// committed these offsets has consumed everything written so far.
func EndOffsets(brokers []string, topic string) (map[int32]int64, error) {
	client, parts, err := partitionsOf(brokers, topic)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	ends := make(map[int32]int64, len(parts))
	for _, p := range parts {
		start, lso, err := kafkautil.Bounds(client, topic, p)
		if err != nil {
			return nil, err
		}
		ends[p] = start
		// Look at the tail first; fall back to the whole log when the tail
		// holds nothing but markers.
		for _, from := range []int64{max(start, lso-1000), start} {
			_, err := kafkautil.ReadCommitted(context.Background(), client, topic, p, from, lso, func(off int64, _ *sarama.Record) error {
				ends[p] = off + 1
				return nil
			})
			if err != nil {
				return nil, err
			}
			if ends[p] > start || from == start {
				break
			}
		}
	}
	return ends, nil
}

// WaitCommitted waits until group has committed, for every partition of
// topic, the end EndOffsets reports when the wait begins: the worker has then
// processed everything written before.
func WaitCommitted(ctx context.Context, brokers []string, group, topic string) error {
	ends, err := EndOffsets(brokers, topic)
	if err != nil {
		return err
	}
	client, err := sarama.NewClient(brokers, Config())
	if err != nil {
		return err
	}
	defer client.Close()
	parts := make([]int32, 0, len(ends))
	for p := range ends {
		parts = append(parts, p)
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last map[int32]int64
	for {
		// A worker still committing holds its offsets in an open
		// transaction most of the time: ask again at the next tick.
		attempt, cancel := context.WithTimeout(ctx, time.Second)
		offs, err := committed(attempt, client, group, topic, parts)
		cancel()
		if err == nil {
			last = offs
			done := true
			for p, end := range ends {
				if end > 0 && offs[p] < end {
					done = false
				}
			}
			if done {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("group %s did not commit %s up to %v (committed %v): %w", group, topic, ends, last, ctx.Err())
		case <-tick.C:
		}
	}
}

// Committed is group's committed offset of each of topic's partitions
// (-1: none), read as a joining member reads it (require_stable): the
// offsets of a transaction that has just committed, not those before it.
func Committed(brokers []string, group, topic string, partitions []int32) (map[int32]int64, error) {
	client, err := sarama.NewClient(brokers, Config())
	if err != nil {
		return nil, err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return committed(ctx, client, group, topic, partitions)
}

func committed(ctx context.Context, client sarama.Client, group, topic string, partitions []int32) (map[int32]int64, error) {
	offs, err := kafkautil.StableOffsets(ctx, client, group, map[string][]int32{topic: partitions})
	if err != nil {
		return nil, err
	}
	return offs[topic], nil
}

// ReadAll reads every committed record of topic up to each partition's last
// stable offset at the time of the call (read_committed; aborted records and
// transaction markers skipped). Records are ordered by partition and offset.
func ReadAll(ctx context.Context, brokers []string, topic string) ([]Record, error) {
	client, parts, err := partitionsOf(brokers, topic)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	var recs []Record
	for _, p := range parts {
		start, lso, err := kafkautil.Bounds(client, topic, p)
		if err != nil {
			return nil, err
		}
		_, err = kafkautil.ReadCommitted(ctx, client, topic, p, start, lso, func(off int64, r *sarama.Record) error {
			list := make([]sarama.RecordHeader, len(r.Headers))
			for i, h := range r.Headers {
				list[i] = *h
			}
			recs = append(recs, Record{Key: string(r.Key), Value: r.Value, Headers: headerMap(r.Headers), HeaderList: list, Partition: p, Offset: off})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("read %s/%d: %w", topic, p, err)
		}
	}
	return recs, nil
}

// WaitSettled waits until no partition of topic has an open transaction
// (last stable offset == high-water mark). A commit's markers are written
// after CommitTxn returns, so a reader right after a commit can otherwise
// stop short of records that are already committed.
func WaitSettled(ctx context.Context, brokers []string, topic string) error {
	client, parts, err := partitionsOf(brokers, topic)
	if err != nil {
		return err
	}
	defer client.Close()
	for _, p := range parts {
		for {
			_, lso, err := kafkautil.Bounds(client, topic, p)
			if err != nil {
				return err
			}
			hwm, err := client.GetOffset(topic, p, sarama.OffsetNewest)
			if err != nil {
				return err
			}
			if lso >= hwm {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s/%d still has an open transaction (LSO %d < HWM %d): %w", topic, p, lso, hwm, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

func headerMap(hs []*sarama.RecordHeader) map[string][]byte {
	h := make(map[string][]byte, len(hs))
	for _, rh := range hs {
		h[string(rh.Key)] = rh.Value
	}
	return h
}

// partitionsOf opens a client and lists topic's partitions; the caller
// closes the client.
func partitionsOf(brokers []string, topic string) (sarama.Client, []int32, error) {
	client, err := sarama.NewClient(brokers, Config())
	if err != nil {
		return nil, nil, err
	}
	parts, err := client.Partitions(topic)
	if err != nil {
		client.Close()
		return nil, nil, fmt.Errorf("partitions of %s: %w", topic, err)
	}
	return client, parts, nil
}

// Brokers is the bootstrap list in KAFKA_BROKERS; a test without it is
// Missing its broker.
func Brokers(t testing.TB) []string {
	t.Helper()
	v := os.Getenv("KAFKA_BROKERS")
	if v == "" {
		Missing(t, "KAFKA_BROKERS is not set; `make test` starts a broker and sets it")
	}
	return strings.Split(v, ",")
}

// Missing ends a test whose prerequisite (a broker, a listener, root) is
// missing: a skip on a developer's machine, a failure under CI=true, where
// .ci/run must have provided it, so that nothing skips in silence there.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: a missing prerequisite fails the run)", msg)
	}
	t.Skip(msg)
}
