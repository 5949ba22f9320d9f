// Package retention compares a group's dedup retention with its input
// topics' retention.ms at the worker's start.
package retention

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/kafkautil"
	"github.com/dedupkit/dedup/internal/metrics"
	"github.com/dedupkit/dedup/processor"
)

// Check compares the topology's retention with the retention.ms of
// each of its input topics. A dedup retention shorter than a topic's means a
// replay of the oldest events still on that topic finds their seen records
// already expired: they are processed again. So every input must fit, and
// the one that keeps its records longest decides; the message names each
// input that does not fit. It logs a warning, or with strict refuses (the
// worker's --strict-retention). Reading retention.ms waits out a broker that
// is down; the comparison itself is configuration and fails at once. It
// needs DescribeConfigs on the input topics, through a client connected
// as sec says. With a Registerer it exports the retentions
// (metrics.SetRetention), so an alert can tell too.
func Check(ctx context.Context, brokers []string, sec processor.Security, log *slog.Logger, reg prometheus.Registerer, topo *dedup.Topology, strict bool) error {
	sc := sarama.NewConfig()
	sc.Version = kafkautil.SaramaVersion
	if err := sec.Apply(sc); err != nil {
		return err
	}
	retention := topo.Retention
	var inputs []topicRetention
	err := kafkautil.WithAdmin(ctx, log, "retention check", brokers, sc, kafkautil.StartupTimeout, func(admin sarama.ClusterAdmin) error {
		inputs = inputs[:0] // a retried attempt reads every input again
		for _, input := range topo.Inputs {
			r, infinite, err := kafkautil.TopicRetention(admin, input)
			if err != nil {
				return err
			}
			inputs = append(inputs, topicRetention{input, r, infinite})
		}
		return nil
	})
	if err != nil {
		return err
	}
	if reg != nil {
		for _, in := range inputs {
			metrics.SetRetention(reg, topo.Group, in.topic, retention, in.retention, in.infinite)
		}
	}
	longer := keptLonger(retention, inputs)
	if len(longer) == 0 {
		return nil
	}
	topics := "input topic"
	if len(longer) > 1 {
		topics = "input topics"
	}
	msg := fmt.Sprintf("--retention %v is shorter than retention.ms of %s %s: replayed events older than %v are processed again",
		retention, topics, strings.Join(longer, ", "), retention)
	if strict {
		return fmt.Errorf("%s (refused by --strict-retention)", msg)
	}
	log.Warn(msg)
	return nil
}

// topicRetention is a topic's retention.ms.
type topicRetention struct {
	topic     string
	retention time.Duration
	infinite  bool
}

// keptLonger names the topics that keep records longer than retention, each
// with its retention.ms.
func keptLonger(retention time.Duration, topics []topicRetention) []string {
	var longer []string
	for _, t := range topics {
		switch {
		case t.infinite:
			longer = append(longer, fmt.Sprintf("%q (infinite (-1))", t.topic))
		case retention < t.retention:
			longer = append(longer, fmt.Sprintf("%q (%s)", t.topic, t.retention))
		}
	}
	return longer
}
