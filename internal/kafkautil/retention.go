package kafkautil

import (
	"fmt"
	"strconv"
	"time"

	"github.com/IBM/sarama"
)

// TopicRetention reads a topic's retention.ms; infinite is true for -1.
func TopicRetention(admin sarama.ClusterAdmin, topic string) (retention time.Duration, infinite bool, err error) {
	entries, err := TopicConfig(admin, topic, "retention.ms")
	if err != nil {
		return 0, false, fmt.Errorf("describe configs of %s: %w", topic, err)
	}
	for _, e := range entries {
		if e.Name != "retention.ms" {
			continue
		}
		ms, err := strconv.ParseInt(e.Value, 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("retention.ms of %s is %q: %w", topic, e.Value, err)
		}
		if ms < 0 {
			return 0, true, nil
		}
		return time.Duration(ms) * time.Millisecond, false, nil
	}
	return 0, false, fmt.Errorf("topic %s reports no retention.ms", topic)
}
