package kafkautil

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/IBM/sarama"
)

// BatchOverhead is what a record batch adds around its records (the v2
// batch header is 61 bytes), with room to spare. A topic's max.message.bytes
// bounds the whole batch, so a record must fit in the limit minus this.
const BatchOverhead = 128

// MaxMessageBytes reads the smallest max.message.bytes of topics, in one
// DescribeConfigs: the largest record batch every one of them takes. A
// topic the caller may not describe (no DescribeConfigs ACL) is left out and
// reported in skipped.
func MaxMessageBytes(admin sarama.ClusterAdmin, topics ...string) (limit int, skipped []string, err error) {
	resources := make([]*sarama.ConfigResource, len(topics))
	for i, topic := range topics {
		resources[i] = &sarama.ConfigResource{Type: sarama.TopicResource, Name: topic, ConfigNames: []string{"max.message.bytes"}}
	}
	results, err := admin.DescribeConfigs(resources, sarama.DescribeConfigsOptions{})
	if err != nil {
		return 0, nil, fmt.Errorf("describe configs of %s: %w", strings.Join(topics, ", "), err)
	}
	for _, r := range results {
		if r.ErrorCode != sarama.ErrNoError {
			err := &sarama.DescribeConfigError{Err: r.ErrorCode, ErrMsg: r.ErrorMsg}
			if Refused(err) {
				skipped = append(skipped, r.Name)
				continue
			}
			return 0, nil, fmt.Errorf("describe configs of %s: %w", r.Name, err)
		}
		for _, e := range r.Configs {
			if e.Name != "max.message.bytes" {
				continue
			}
			n, err := strconv.Atoi(e.Value)
			if err != nil {
				return 0, nil, fmt.Errorf("max.message.bytes of %s is %q: %w", r.Name, e.Value, err)
			}
			if limit == 0 || n < limit {
				limit = n
			}
		}
	}
	return limit, skipped, nil
}
