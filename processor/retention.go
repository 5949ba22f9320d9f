package processor

import (
	"context"
	"fmt"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/kafkautil"
	"github.com/dedupkit/dedup/metrics"
)

// CheckRetention compares the topology's retention with its input topic's
// retention.ms. A dedup retention shorter than the topic's means a replay of
// the oldest events still on the topic finds their seen records already
// expired: they are processed again. It logs a warning, or with strict
// refuses (the worker's --strict-retention). Reading retention.ms waits out
// a broker that is down; the comparison itself is configuration and fails
// at once. It needs DescribeConfigs on the input topic. cfg gives the
// brokers, security and logger, and with a Registerer it exports both
// retentions (metrics.SetRetention), so an alert can tell too.
func CheckRetention(ctx context.Context, cfg Config, topo *dedup.Topology, strict bool) error {
	cfg.setDefaults()
	log := cfg.Logger
	c := sarama.NewConfig()
	c.Version = kafkautil.SaramaVersion
	if err := cfg.Security.Apply(c); err != nil {
		return err
	}
	input, retention := topo.Input, topo.Table.Retention
	var (
		topicRetention time.Duration
		infinite       bool
	)
	err := kafkautil.WithAdmin(ctx, log, "retention check", cfg.Brokers, c, kafkautil.StartupTimeout, func(admin sarama.ClusterAdmin) error {
		var err error
		topicRetention, infinite, err = kafkautil.TopicRetention(admin, input)
		return err
	})
	if err != nil {
		return err
	}
	if cfg.Registerer != nil {
		metrics.SetRetention(cfg.Registerer, topo.Group, input, retention, topicRetention, infinite)
	}
	if !infinite && retention >= topicRetention {
		return nil
	}
	shown := "infinite (-1)"
	if !infinite {
		shown = topicRetention.String()
	}
	msg := fmt.Sprintf("--retention %v is shorter than retention.ms of input topic %q (%s): replayed events older than %v are processed again",
		retention, input, shown, retention)
	if strict {
		return fmt.Errorf("%s (refused by --strict-retention)", msg)
	}
	log.Warn(msg)
	return nil
}
