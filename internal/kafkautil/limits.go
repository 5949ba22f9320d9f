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

// RecordOverhead and HeaderOverhead are sarama's upper bounds of what a
// record (v2 format) adds to its key and value, and each header to its key
// and value (ProducerMessage.ByteSize). The topology's size check
// (dedup.RecordSize) and the producer's (internal/txnproducer) count with
// them, so a record the one lets through the other sends.
const (
	RecordOverhead = 5*5 + 10 + 1 // five varint32s, a varint64, the attributes byte
	HeaderOverhead = 2 * 5        // two varint32 lengths
)

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
