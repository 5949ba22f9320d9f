package harness

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/bench/procstat"
	"github.com/dedupkit/dedup/codecs"
	"github.com/dedupkit/dedup/internal/kafkautil"
)

func saramaConfig() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = kafkautil.SaramaVersion
	c.ClientID = "bench-harness"
	c.Metadata.Retry.Max = 10
	return c
}

// admin wraps the cluster admin the harness uses between runs.
type admin struct {
	client sarama.Client
	ca     sarama.ClusterAdmin
}

func newAdmin(brokers []string) (*admin, error) {
	client, err := waitForBroker(brokers, saramaConfig(), time.Minute)
	if err != nil {
		return nil, err
	}
	ca, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		client.Close()
		return nil, err
	}
	return &admin{client: client, ca: ca}, nil
}

func (a *admin) Close() error { return a.ca.Close() }

// createTopic creates a topic; an input topic stamps records with the
// broker's append time, the reference point of the latency figures.
func (a *admin) createTopic(name string, partitions int32, config map[string]string) error {
	detail := &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: -1, ConfigEntries: map[string]*string{}}
	for k, v := range config {
		detail.ConfigEntries[k] = &v
	}
	if err := a.ca.CreateTopic(name, detail, false); err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	// Wait until every partition has a leader that answers ListOffsets: a
	// client that fetches a partition whose leader is not elected yet fails.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := a.topicReady(name, partitions)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topic %s not ready: %w", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (a *admin) topicReady(name string, partitions int32) error {
	if err := a.client.RefreshMetadata(name); err != nil {
		return err
	}
	parts, err := a.client.Partitions(name)
	if err != nil {
		return err
	}
	if int32(len(parts)) != partitions {
		return fmt.Errorf("%d of %d partitions", len(parts), partitions)
	}
	for _, p := range parts {
		if _, err := a.client.GetOffset(name, p, sarama.OffsetNewest); err != nil {
			return err
		}
	}
	return nil
}

// topicSpec is a topic to create with its configs.
type topicSpec struct {
	name string
	cfg  map[string]string
}

var (
	inputTopicConfig = map[string]string{"message.timestamp.type": "LogAppendTime"}
	tableTopicConfig = map[string]string{"cleanup.policy": "compact"}
)

// deleteTopics deletes what exists of names (the disk is finite).
func (a *admin) deleteTopics(names ...string) {
	topics, err := a.ca.ListTopics()
	if err != nil {
		return
	}
	for _, n := range names {
		if _, ok := topics[n]; ok {
			_ = a.ca.DeleteTopic(n)
		}
	}
}

// endOffsets is each partition's high-water mark (for a plain topic, the
// offset after its last record).
func (a *admin) endOffsets(topic string) (map[int32]int64, error) {
	if err := a.client.RefreshMetadata(topic); err != nil {
		return nil, err
	}
	parts, err := a.client.Partitions(topic)
	if err != nil {
		return nil, err
	}
	ends := map[int32]int64{}
	for _, p := range parts {
		off, err := a.client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return nil, err
		}
		ends[p] = off
	}
	return ends, nil
}

// committed reports whether group has committed every end offset of topic.
func (a *admin) committed(group, topic string, ends map[int32]int64) bool {
	parts := make([]int32, 0, len(ends))
	for p := range ends {
		parts = append(parts, p)
	}
	resp, err := a.ca.ListConsumerGroupOffsets(group, map[string][]int32{topic: parts})
	if err != nil {
		return false
	}
	for p, end := range ends {
		b := resp.GetBlock(topic, p)
		if end > 0 && (b == nil || b.Offset < end) {
			return false
		}
	}
	return true
}

// prefillKey is the event ID of the i-th seen record a fill writes.
func prefillKey(prefix string, i int) string { return "evt-" + prefix + "-" + strconv.Itoa(i) }

// fillTable writes n seen records keyed prefillKey(prefix, i) to a compacted
// table topic, spread by key hash: the changelog a worker that processed n
// events would have.
func fillTable(ctx context.Context, brokers []string, topic, prefix string, n int) error {
	now := time.Now()
	return fill(ctx, brokers, topic, n, sarama.NewHashPartitioner, func(i int) (*sarama.ProducerMessage, error) {
		rec := &codecs.SeenRecord{FirstProcessed: now, EventTime: now, AggregateID: "order-" + strconv.Itoa(i/5),
			Topic: "orders", Partition: int32(i % 12), Offset: int64(i), ExpiresAt: now.Add(7 * 24 * time.Hour)}
		v, err := rec.MarshalBinary()
		if err != nil {
			return nil, err
		}
		return &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(prefillKey(prefix, i)),
			Value: sarama.ByteEncoder(v)}, nil
	})
}

// fillKStreamsTable writes n seen records keyed prefillKey(prefix, i) to the
// changelog of the Kafka Streams application's store (bench/kstreams:
// String keys, Long values, the first-seen timestamp), each in the
// partition the Java producer's murmur2 picks for its key, as it does for
// the repartition topic whose tasks own the store: the changelog that
// application would have after processing n distinct events.
func fillKStreamsTable(ctx context.Context, brokers []string, topic, prefix string, n int) error {
	now := make([]byte, 8)
	binary.BigEndian.PutUint64(now, uint64(time.Now().UnixMilli()))
	return fill(ctx, brokers, topic, n, sarama.NewMurmur2Partitioner, func(i int) (*sarama.ProducerMessage, error) {
		return &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(prefillKey(prefix, i)),
			Value: sarama.ByteEncoder(now)}, nil
	})
}

// fill writes the n records msg makes through one asynchronous producer
// with the given partitioner, acknowledged by all replicas.
func fill(ctx context.Context, brokers []string, topic string, n int, partitioner sarama.PartitionerConstructor,
	msg func(i int) (*sarama.ProducerMessage, error)) error {
	c := saramaConfig()
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Return.Successes = true
	c.Producer.Partitioner = partitioner
	c.Producer.Flush.Messages = 2000
	c.Producer.Flush.Frequency = 5 * time.Millisecond
	c.ChannelBufferSize = 8192
	prod, err := sarama.NewAsyncProducer(brokers, c)
	if err != nil {
		return fmt.Errorf("producer for %s: %w", topic, err)
	}
	done := make(chan error, 1)
	go func() { // owns Successes and Errors until both close
		var first error
		succ, errs := prod.Successes(), prod.Errors()
		for succ != nil || errs != nil {
			select {
			case _, ok := <-succ:
				if !ok {
					succ = nil
				}
			case e, ok := <-errs:
				if !ok {
					errs = nil
				} else if first == nil {
					first = e.Err
				}
			}
		}
		done <- first
	}()
	var sendErr error
	for i := 0; i < n && sendErr == nil; i++ {
		m, err := msg(i)
		if err != nil {
			sendErr = err
			break
		}
		select {
		case prod.Input() <- m:
		case <-ctx.Done():
			sendErr = ctx.Err()
		}
	}
	prod.AsyncClose()
	if err := <-done; err != nil && sendErr == nil {
		sendErr = err
	}
	if sendErr != nil {
		return fmt.Errorf("fill %s: %w", topic, sendErr)
	}
	return nil
}

// brokerPID reads the kafka.sh pid file of node 1, 0 when unknown.
func brokerPID(kafkaData string) int {
	if kafkaData == "" {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(kafkaData, "node-1", "kafka.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// topicDiskBytes is the size of a topic's partition dirs in the broker's log
// dir, -1 when unknown.
func topicDiskBytes(kafkaData, topic string) int64 {
	if kafkaData == "" {
		return -1
	}
	dirs, _ := filepath.Glob(filepath.Join(kafkaData, "node-1", "data", topic+"-*"))
	var total int64
	for _, d := range dirs {
		n, err := procstat.DirSize(d)
		if err == nil {
			total += n
		}
	}
	if len(dirs) == 0 {
		return -1
	}
	return total
}

// waitForBroker retries connecting until a broker answers or the deadline
// passes: the harness starts its broker and goes on while it boots.
func waitForBroker(brokers []string, cfg *sarama.Config, timeout time.Duration) (sarama.Client, error) {
	deadline := time.Now().Add(timeout)
	for {
		client, err := sarama.NewClient(brokers, cfg)
		if err == nil {
			return client, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no broker of %v answered within %v: %w", brokers, timeout, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
