package atleastonce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/kafkautil"
)

// prepareTopics creates every topic the group writes (output, dead letters,
// table, loop) when missing, like the exactly-once runtime, fails at once on
// inputs of different partition counts or a table or loop topic that does
// not fit the group, checks that the group and every input may be read, and
// waits out a broker that is down.
func prepareTopics(ctx context.Context, cfg Config, sc *sarama.Config, topo *dedup.Topology) error {
	err := kafkautil.WithAdmin(ctx, cfg.Logger, "prepare topics", cfg.Brokers, sc,
		kafkautil.StartupTimeout, func(admin sarama.ClusterAdmin) error {
			if _, err := kafkautil.EnsureGroupTopics(admin, groupTopics(topo, cfg.Brokers), cfg.Replication); err != nil {
				return err
			}
			return kafkautil.CheckGroup(admin, topo.Group)
		})
	if err != nil {
		return err
	}
	// The exactly-once runtime stops on its first refused fetch; goka would
	// wait without a word (kafkautil.CheckRead).
	return kafkautil.Retry(ctx, cfg.Logger, "check input access", kafkautil.StartupTimeout, func() error {
		client, err := sarama.NewClient(cfg.Brokers, sc)
		if err != nil {
			return fmt.Errorf("connect to %v: %w", cfg.Brokers, err)
		}
		defer client.Close()
		for _, input := range topo.Inputs {
			if err := kafkautil.CheckRead(client, input); err != nil {
				return err
			}
		}
		return nil
	})
}

func groupTopics(topo *dedup.Topology, brokers []string) kafkautil.GroupTopics {
	return kafkautil.GroupTopics{Inputs: topo.Inputs, Outputs: topo.Outputs, DLQ: topo.DLQ, Table: topo.TableTopic(), Loop: topo.LoopTopic(),
		Group: topo.Group, Brokers: brokers}
}

// topicVisibleTimeout bounds the wait for a topic prepareTopics created to
// show in a broker's metadata.
const topicVisibleTimeout = 30 * time.Second

// ownedTopics is goka's topic manager without topic creation: prepareTopics
// made every topic already. goka's own Ensure* checks the metadata and
// creates what it does not see; a topic created a moment earlier (by
// prepareTopics, or by another instance starting at the same time) is often
// not in a broker's metadata yet, so goka's create failed the processor with
// "Topic already exists". Here Ensure* waits until the topic is visible and
// checks its partition count (copartitioning), which goka checked too.
//
// GetOffset, which goka's partition setup calls for the table, retries
// transient errors for up to brokerMoveTimeout: sarama retries once, and while a
// killed broker's partitions wait for a new leader, the answer is "not the
// leader" for several seconds; goka would fail the whole processor on it.
type ownedTopics struct {
	goka.TopicManager
	timeout       time.Duration
	offsetTimeout time.Duration
	log           *slog.Logger
}

// brokerMoveTimeout bounds the waits for a killed broker to be fenced
// (broker.session.timeout.ms, 9 s by default) and its partitions' leaders
// elected: the table offset reads and awaitBrokers.
const brokerMoveTimeout = 30 * time.Second

func ownedTopicsBuilder(sc *sarama.Config, log *slog.Logger) goka.TopicManagerBuilder {
	return func(brokers []string) (goka.TopicManager, error) {
		awaitBrokers(brokers, sc, log)
		tm, err := goka.TopicManagerBuilderWithConfig(sc, goka.NewTopicManagerConfig())(brokers)
		if err != nil {
			return nil, err
		}
		return ownedTopics{TopicManager: tm, timeout: topicVisibleTimeout, offsetTimeout: brokerMoveTimeout, log: log}, nil
	}
}

func (t ownedTopics) GetOffset(topic string, partition int32, at int64) (int64, error) {
	var offset int64
	err := kafkautil.Retry(context.Background(), t.log, fmt.Sprintf("offset of %s/%d", topic, partition), t.offsetTimeout, func() error {
		var err error
		offset, err = t.TopicManager.GetOffset(topic, partition, at)
		return err
	})
	return offset, err
}

func (t ownedTopics) EnsureTableExists(topic string, npar int) error  { return t.await(topic, npar) }
func (t ownedTopics) EnsureStreamExists(topic string, npar int) error { return t.await(topic, npar) }
func (t ownedTopics) EnsureTopicExists(topic string, npar, _ int, _ map[string]string) error {
	return t.await(topic, npar)
}

func (t ownedTopics) await(topic string, npar int) error {
	deadline := time.Now().Add(t.timeout)
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		parts, err := t.Partitions(topic) // refreshes the metadata first
		if err == nil && len(parts) > 0 {
			if len(parts) != npar {
				return fmt.Errorf("topic %s has %d partitions, want %d (the input's)", topic, len(parts), npar)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topic %s not in the cluster's metadata %v after it was created (last error: %v)", topic, t.timeout, err)
		}
		time.Sleep(pause)
	}
}

// awaitBrokers waits, for up to brokerMoveTimeout, until every broker of the
// cluster's metadata accepts a connection. goka's topic manager checks one
// broker, client.Brokers()[0], and fails with an untyped error ("cannot
// connect to broker") when it refuses. sarama builds that list from a map, so
// the broker goka checks is any of them, and a killed broker stays in the
// metadata until the controller fences it: a goka processor built meanwhile
// would fail at random (seen in `make chaos`, first while this checked only
// the first broker of our own client's list). Checked with a client of our
// own, closed each time, because goka's leaks its client when the check
// fails. After the timeout, or at once after an error that is not transient
// (kafkautil.Retry's rules and backoff), goka is left to report whatever it
// finds.
func awaitBrokers(brokers []string, sc *sarama.Config, log *slog.Logger) {
	_ = kafkautil.Retry(context.Background(), log, "goka topic manager", brokerMoveTimeout, func() error {
		return brokersReachable(brokers, sc)
	})
}

// brokersReachable connects to every broker in the metadata and reports the
// first that refuses.
func brokersReachable(brokers []string, sc *sarama.Config) error {
	client, err := sarama.NewClient(brokers, sc)
	if err != nil {
		return err
	}
	defer client.Close()
	active := client.Brokers()
	if len(active) == 0 {
		return sarama.ErrOutOfBrokers
	}
	for _, b := range active {
		if err := b.Open(sc); err != nil && !errors.Is(err, sarama.ErrAlreadyConnected) {
			return fmt.Errorf("broker %s: %w", b.Addr(), err)
		}
		if ok, err := b.Connected(); !ok {
			if err == nil {
				err = sarama.ErrNotConnected
			}
			return fmt.Errorf("broker %s: %w", b.Addr(), err) // both kinds are transient
		}
	}
	return nil
}
