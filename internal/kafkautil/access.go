package kafkautil

import (
	"fmt"

	"github.com/IBM/sarama"
)

// CheckGroup asks the group's coordinator to describe the group, which
// needs the same ACL as joining it (READ implies DESCRIBE). A member without
// it learns nothing until sarama's coordinator lookups give up, each after
// its Metadata.Retry budget and the whole after Rebalance.Retry's: minutes,
// silently. Asked once at start, a missing ACL fails the start with
// GROUP_AUTHORIZATION_FAILED (Refused). A group that does not exist yet is
// described as Dead, without error.
func CheckGroup(admin sarama.ClusterAdmin, group string) error {
	descs, err := admin.DescribeConsumerGroups([]string{group})
	if err != nil {
		return fmt.Errorf("describe group %s: %w", group, err)
	}
	for _, d := range descs {
		if d.Err != sarama.ErrNoError {
			return fmt.Errorf("describe group %s: %w", group, d.Err)
		}
	}
	return nil
}

// CheckRead fetches a byte of topic's partition 0, which needs READ on the
// topic. goka's (best-effort) processor, refused its fetches, logs nothing
// and waits: asked once at start, a missing ACL fails the start with
// TOPIC_AUTHORIZATION_FAILED (Refused). Any other answer (an offset out of
// range, say) is not this check's business.
func CheckRead(client sarama.Client, topic string) error {
	leader, err := client.Leader(topic, 0)
	if err != nil {
		return fmt.Errorf("leader of %s/0: %w", topic, err)
	}
	req := &sarama.FetchRequest{Version: 4, MaxWaitTime: 1, MinBytes: 1, MaxBytes: 1, Isolation: sarama.ReadCommitted}
	req.AddBlock(topic, 0, 0, 1, -1)
	resp, err := leader.Fetch(req)
	if err != nil {
		return fmt.Errorf("fetch %s/0: %w", topic, err)
	}
	if b := resp.GetBlock(topic, 0); b != nil && Refused(b.Err) {
		return fmt.Errorf("read %s: %w", topic, b.Err)
	}
	return nil
}
