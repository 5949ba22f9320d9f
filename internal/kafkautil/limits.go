package kafkautil

import (
	"fmt"
	"strconv"

	"github.com/IBM/sarama"
)

// BatchOverhead is what a record batch adds around its records (the v2
// batch header is 61 bytes), with room to spare. A topic's max.message.bytes
// bounds the whole batch, so a record must fit in the limit minus this.
const BatchOverhead = 128

// MaxMessageBytes reads the smallest max.message.bytes of topics: the
// largest record batch every one of them takes. A topic the caller may not
// describe (no DescribeConfigs ACL) is left out and reported in skipped.
func MaxMessageBytes(admin sarama.ClusterAdmin, topics ...string) (limit int, skipped []string, err error) {
	for _, topic := range topics {
		entries, err := TopicConfig(admin, topic, "max.message.bytes")
		if Refused(err) {
			skipped = append(skipped, topic)
			continue
		}
		if err != nil {
			return 0, nil, fmt.Errorf("describe configs of %s: %w", topic, err)
		}
		for _, e := range entries {
			if e.Name != "max.message.bytes" {
				continue
			}
			n, err := strconv.Atoi(e.Value)
			if err != nil {
				return 0, nil, fmt.Errorf("max.message.bytes of %s is %q: %w", topic, e.Value, err)
			}
			if limit == 0 || n < limit {
				limit = n
			}
		}
	}
	return limit, skipped, nil
}
