package kafkautil

import "github.com/IBM/sarama"

// TopicConfig reads the named configs of one topic with DescribeConfigs
// (sarama's single-resource DescribeConfig is deprecated). The topic's own
// error code comes back as a *sarama.DescribeConfigError, as DescribeConfig
// returned it, so that Refused and Transient recognise a missing ACL or a
// topic the broker does not know yet.
func TopicConfig(admin sarama.ClusterAdmin, topic string, names ...string) ([]sarama.ConfigEntry, error) {
	resource := &sarama.ConfigResource{Type: sarama.TopicResource, Name: topic, ConfigNames: names}
	results, err := admin.DescribeConfigs([]*sarama.ConfigResource{resource}, sarama.DescribeConfigsOptions{})
	if err != nil {
		return nil, err
	}
	var entries []sarama.ConfigEntry
	for _, r := range results {
		if r.Name != topic {
			continue
		}
		if r.ErrorCode != sarama.ErrNoError {
			return nil, &sarama.DescribeConfigError{Err: r.ErrorCode, ErrMsg: r.ErrorMsg}
		}
		entries = append(entries, r.Configs...)
	}
	return entries, nil
}
