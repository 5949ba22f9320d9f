package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/kafkautil"
)

// checkRetention compares --retention with the input topic's retention.ms.
// A dedup retention shorter than the topic's means a replay of the oldest
// events still on the topic finds their seen records already expired: they
// are processed again. Warn, or refuse with --strict-retention. Reading
// retention.ms waits out a broker that is down (kafkautil.WithAdmin); the
// comparison itself is configuration and fails at once.
func checkRetention(ctx context.Context, cfg *Config, log *slog.Logger) error {
	c := sarama.NewConfig()
	c.Version = kafkautil.SaramaVersion
	if err := cfg.Security.Apply(c); err != nil {
		return err
	}
	var (
		topicRetention time.Duration
		infinite       bool
	)
	err := kafkautil.WithAdmin(ctx, log, "retention check", cfg.Brokers, c, kafkautil.StartupTimeout, func(admin sarama.ClusterAdmin) error {
		var err error
		topicRetention, infinite, err = kafkautil.TopicRetention(admin, cfg.Input)
		return err
	})
	if err != nil {
		return err
	}
	if !infinite && cfg.Retention >= topicRetention {
		return nil
	}
	shown := "infinite (-1)"
	if !infinite {
		shown = topicRetention.String()
	}
	msg := fmt.Sprintf("--retention %v is shorter than retention.ms of input topic %q (%s): replayed events older than %v are processed again",
		cfg.Retention, cfg.Input, shown, cfg.Retention)
	if cfg.StrictRetention {
		return fmt.Errorf("%s (refused by --strict-retention)", msg)
	}
	log.Warn(msg)
	return nil
}
