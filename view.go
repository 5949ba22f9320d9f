package dedup

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"

	"github.com/dedupkit/dedup/internal/kafkautil"
)

// ViewOptions are what goka's own View needs to read a group table the
// exactly-once runtime writes, so that another service can ask it whether,
// where and when an ID was processed:
//
//	view, err := goka.NewView(brokers, goka.GroupTable("settlement-service"), codecs.Seen{}, dedup.ViewOptions(nil)...)
//
// The table topic is transactional, and its last offset is a transaction
// marker that no consumer receives. Goka's View recovers a partition until
// it has consumed the record at the high-water mark minus one, so on its
// own it waits for ever where a marker ends a partition, and where an open
// transaction's records end it, goka's default read_uncommitted recovers on
// them and keeps them if the transaction aborts. With these options it
// reads read_committed, and its topic manager gives goka, as the newest
// offset of a partition, the offset after the last committed record below
// the partition's last stable offset: goka's recovery ends on that record.
// The View then serves the committed seen records (Get returns a
// *codecs.SeenRecord) and follows the commits that come after.
// docs/library.md says what it sees and its limits.
//
// config is the client configuration (TLS, SASL); nil means
// goka.DefaultConfig(). It is copied, not changed, and speaks at least
// Kafka 2.8, as the runtime. Append further goka options (storage, logger)
// after these.
func ViewOptions(config *sarama.Config) []goka.ViewOption {
	if config == nil {
		config = goka.DefaultConfig()
	}
	base := *config
	base.Consumer.IsolationLevel = sarama.ReadCommitted
	// The tail is read with the requests of Kafka 2.8, which the runtime
	// needs anyway; goka's default config speaks 2.0.
	if !base.Version.IsAtLeast(kafkautil.SaramaVersion) {
		base.Version = kafkautil.SaramaVersion
	}
	return []goka.ViewOption{
		goka.WithViewConsumerSaramaBuilder(func(brokers []string, clientID string) (sarama.Consumer, error) {
			c := base
			c.ClientID = clientID
			return sarama.NewConsumer(brokers, &c)
		}),
		goka.WithViewTopicManagerBuilder(func(brokers []string) (goka.TopicManager, error) {
			c := base
			client, err := sarama.NewClient(brokers, &c)
			if err != nil {
				return nil, fmt.Errorf("dedup: view client: %w", err)
			}
			return committedTopics{client}, nil
		}),
	}
}

// committedTopics is the View's goka.TopicManager: the newest offset of a
// partition is the offset after its last committed record below the last
// stable offset, where goka's recovery, which waits for the record just
// before the newest offset, can end. A View creates no topics.
type committedTopics struct{ client sarama.Client }

var errViewCreates = errors.New("dedup: the table view's topic manager creates no topics")

func (committedTopics) EnsureTableExists(string, int) error  { return errViewCreates }
func (committedTopics) EnsureStreamExists(string, int) error { return errViewCreates }
func (committedTopics) EnsureTopicExists(string, int, int, map[string]string) error {
	return errViewCreates
}

// Partitions lists topic's partitions after a metadata refresh of all topics,
// as goka's does: asking for one topic could create it on a broker that
// creates topics on demand.
func (t committedTopics) Partitions(topic string) ([]int32, error) {
	if err := t.client.RefreshMetadata(); err != nil {
		return nil, fmt.Errorf("refreshing metadata: %w", err)
	}
	topics, err := t.client.Topics()
	if err != nil {
		return nil, err
	}
	if !slices.Contains(topics, topic) {
		return nil, fmt.Errorf("topic %s does not exist", topic)
	}
	return t.client.Partitions(topic)
}

func (t committedTopics) GetOffset(topic string, partition int32, at int64) (int64, error) {
	if at != sarama.OffsetNewest {
		return t.client.GetOffset(topic, partition, at)
	}
	return committedEnd(t.client, topic, partition)
}

func (t committedTopics) Close() error { return t.client.Close() }

// committedEnd is the offset after the last committed record of
// topic/partition below its last stable offset, or the log start when it
// has none: goka then has nothing to recover. It reads the log's tail, and
// further back while the tail holds only markers and aborted records.
func committedEnd(client sarama.Client, topic string, partition int32) (int64, error) {
	start, lso, err := kafkautil.Bounds(client, topic, partition)
	if err != nil {
		return 0, err
	}
	for span := int64(1024); ; span *= 8 {
		from, end := max(start, lso-span), int64(-1)
		_, err := kafkautil.ReadCommitted(context.Background(), client, topic, partition, from, lso,
			func(off int64, _ *sarama.Record) error {
				end = off + 1
				return nil
			})
		if err != nil {
			return 0, err
		}
		if end >= 0 {
			return end, nil
		}
		if from == start {
			return start, nil
		}
	}
}
