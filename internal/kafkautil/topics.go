// Package kafkautil holds the small Kafka admin steps both runtimes share.
package kafkautil

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/IBM/sarama"
)

// ErrNoInputTopic is returned when the input topic does not exist: the
// worker never creates it, since its partition count is the producers' choice.
var ErrNoInputTopic = errors.New("input topic does not exist")

// SaramaVersion is the protocol version the worker speaks: Kafka 2.8 or newer
// (transactions with group metadata need 2.5; replication factor -1, "broker
// default", needs 2.4).
var SaramaVersion = sarama.V2_8_0_0

// InputTopicGrace is how long EnsureGroupTopics keeps asking for an input topic that
// the broker says does not exist. A topic created a moment ago is known to
// the broker that created it before the others have its metadata: a worker
// deployed right after `kafka-topics --create` on a multi-broker cluster can
// ask one that has not caught up, and without the grace would exit with
// "input topic does not exist".
const InputTopicGrace = 5 * time.Second

// ensureTopics checks that every input of t exists and that all have one
// partition count, and creates the dead-letter and output topics that are
// missing with that count and the broker's default replication factor when
// replication is -1. It returns as well what one DescribeTopics said of
// every topic of t at the start (meta), so
// that EnsureGroupTopics asks no more: a restarted worker, whose topics all
// exist, waits on one request instead of one per topic.
func ensureTopics(admin sarama.ClusterAdmin, t GroupTopics, replication int16, grace time.Duration) (partitions int32, meta map[string]*sarama.TopicMetadata, err error) {
	if len(t.Inputs) == 0 {
		return 0, nil, errors.New("no input topic")
	}
	meta, err = describeTopics(admin, t.all())
	if err != nil {
		return 0, nil, err
	}
	deadline := time.Now().Add(grace)
	counts := make([]int32, len(t.Inputs))
	for i, input := range t.Inputs {
		counts[i], err = inputCount(meta[input], input)
		for errors.Is(err, ErrNoInputTopic) && time.Now().Before(deadline) {
			time.Sleep(min(250*time.Millisecond, time.Until(deadline))) // metadata reaching the other brokers
			counts[i], err = describeInput(admin, input)
		}
		if err != nil {
			return 0, nil, err
		}
	}
	if err := checkInputsCopartitioned(t, counts); err != nil {
		return 0, nil, err
	}
	for _, topic := range append([]string{t.DLQ}, t.Outputs...) {
		if _, ok := partitionsIn(meta, topic); ok {
			continue
		}
		if err := CreateTopic(admin, topic, counts[0], replication, nil); err != nil {
			return 0, nil, err
		}
	}
	return counts[0], meta, nil
}

// all is every topic of t, each once.
func (t GroupTopics) all() []string {
	var out []string
	for _, topic := range append(append(slices.Clone(t.Inputs), t.DLQ, t.Table, t.Loop), t.Outputs...) {
		if topic != "" && !slices.Contains(out, topic) {
			out = append(out, topic)
		}
	}
	return out
}

// describeTopics asks for topics' metadata in one request and returns each
// answer by topic name.
func describeTopics(admin sarama.ClusterAdmin, topics []string) (map[string]*sarama.TopicMetadata, error) {
	answers, err := admin.DescribeTopics(topics)
	if err != nil {
		return nil, fmt.Errorf("describe topics %q: %w", topics, err)
	}
	meta := make(map[string]*sarama.TopicMetadata, len(answers))
	for _, m := range answers {
		meta[m.Name] = m
	}
	return meta, nil
}

// partitionsIn is topic's partition count in meta; false when the broker
// did not show it, or showed it with an error (no Describe ACL, say): the
// caller then goes the longer way for it, as if it had not been asked.
func partitionsIn(meta map[string]*sarama.TopicMetadata, topic string) (int32, bool) {
	m := meta[topic]
	if m == nil || m.Err != sarama.ErrNoError {
		return 0, false
	}
	return int32(len(m.Partitions)), true
}

// describeInput returns the input's partition count, ErrNoInputTopic when
// the broker asked does not know it.
func describeInput(admin sarama.ClusterAdmin, input string) (int32, error) {
	meta, err := admin.DescribeTopics([]string{input})
	if err != nil {
		return 0, fmt.Errorf("describe topic %q: %w", input, err)
	}
	if len(meta) != 1 {
		return inputCount(nil, input)
	}
	return inputCount(meta[0], input)
}

// inputCount is the partition count in the input's metadata m, or
// ErrNoInputTopic when the broker did not know it (m nil: not in the answer).
func inputCount(m *sarama.TopicMetadata, input string) (int32, error) {
	if m == nil || errors.Is(m.Err, sarama.ErrUnknownTopicOrPartition) {
		return 0, fmt.Errorf("%w: %q (create it first; its partition count sets the worker's parallelism)", ErrNoInputTopic, input)
	}
	if m.Err != sarama.ErrNoError {
		return 0, fmt.Errorf("describe topic %q: %w", input, m.Err)
	}
	return int32(len(m.Partitions)), nil
}

// GroupTopics names the topics of one dedup consumer group, and the group
// and brokers that the fix commands of a mismatch error name.
type GroupTopics struct {
	Inputs           []string
	DLQ, Table, Loop string
	Outputs          []string
	Group            string
	Brokers          []string
}

// EnsureGroupTopics checks the inputs and creates, when missing, the output
// and dead-letter topics, the compacted table changelog and the loop topic
// (a day's retention: a looped record is read within seconds), all with the
// inputs' partition count. Both runtimes call it before consuming. Inputs
// with different partition counts, or a table or loop topic that exists
// already with another count or a table whose cleanup.policy is not
// compact, fail with ErrTopicMismatch naming the fix: the worker never
// alters a topic it did not create.
func EnsureGroupTopics(admin sarama.ClusterAdmin, t GroupTopics, replication int16) (int32, error) {
	parts, meta, err := ensureTopics(admin, t, replication, InputTopicGrace)
	if err != nil {
		return 0, err
	}
	existed, err := ensureOwnTopic(admin, t, t.Table, parts, meta, replication, map[string]string{"cleanup.policy": tableCleanupPolicy})
	if err != nil {
		return 0, err
	}
	if existed {
		if err := checkTablePolicy(admin, t); err != nil {
			return 0, err
		}
	}
	if _, err := ensureOwnTopic(admin, t, t.Loop, parts, meta, replication, map[string]string{"retention.ms": "86400000"}); err != nil {
		return 0, err
	}
	return parts, nil
}

// ensureOwnTopic creates the table or loop topic unless it exists, and
// checks the partition count of one that does (ErrTopicMismatch): from
// meta when it was described before, else asking again (another instance
// created it a moment ago). existed says whether it did.
func ensureOwnTopic(admin sarama.ClusterAdmin, t GroupTopics, topic string, parts int32, meta map[string]*sarama.TopicMetadata,
	replication int16, config map[string]string) (existed bool, err error) {
	if n, ok := partitionsIn(meta, topic); ok {
		return true, copartitioned(t, topic, n, parts)
	}
	existed, err = createTopic(admin, topic, parts, replication, config)
	if err != nil || !existed {
		return existed, err
	}
	return true, checkCopartitioned(admin, t, topic, parts)
}

// CreateTopic creates a topic unless it exists.
func CreateTopic(admin sarama.ClusterAdmin, name string, partitions int32, replication int16, config map[string]string) error {
	_, err := createTopic(admin, name, partitions, replication, config)
	return err
}

// createTopic creates a topic unless it exists, and says whether it did.
// A failure names the topic.
func createTopic(admin sarama.ClusterAdmin, name string, partitions int32, replication int16, config map[string]string) (existed bool, err error) {
	detail := &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: replication}
	if len(config) > 0 {
		detail.ConfigEntries = map[string]*string{}
		for k, v := range config {
			detail.ConfigEntries[k] = &v
		}
	}
	err = admin.CreateTopic(name, detail, false)
	if errors.Is(err, sarama.ErrTopicAlreadyExists) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("create topic %q: %w", name, err)
	}
	return false, nil
}
