package kafkautil

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// StableOffsets reads group's committed offsets of the partitions in parts
// (nil: every partition the group has committed) as a joining member reads
// them: with require_stable. A transaction's offsets become visible to a
// plain offset fetch only once the coordinator has written its markers,
// which it does after EndTxn returned; a plain fetch right after a commit
// can answer the offset before it. With require_stable the coordinator
// answers UNSTABLE_OFFSET_COMMIT for a partition whose offsets a
// transaction still holds, and StableOffsets asks again until it does not
// or ctx ends. A partition without a committed offset is -1.
func StableOffsets(ctx context.Context, client sarama.Client, group string, parts map[string][]int32) (map[string]map[int32]int64, error) {
	backoff := 10 * time.Millisecond
	for {
		offs, err := stableOffsets(client, group, parts)
		if err == nil {
			return offs, nil
		}
		var kerr sarama.KError
		if !errors.As(err, &kerr) || !retriableOffsetFetch(kerr) {
			return nil, err
		}
		if kerr != sarama.ErrUnstableOffsetCommit {
			_ = client.RefreshCoordinator(group)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("offsets of group %s: %w (last: %w)", group, ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// retriableOffsetFetch are the answers after which the same fetch may
// succeed: a transaction still open or being completed, or a coordinator
// that moved or is still loading the group.
func retriableOffsetFetch(err sarama.KError) bool {
	switch err {
	case sarama.ErrUnstableOffsetCommit, sarama.ErrOffsetsLoadInProgress,
		sarama.ErrNotCoordinatorForConsumer, sarama.ErrConsumerCoordinatorNotAvailable:
		return true
	}
	return false
}

func stableOffsets(client sarama.Client, group string, parts map[string][]int32) (map[string]map[int32]int64, error) {
	req := sarama.NewOffsetFetchRequest(client.Config().Version, group, parts)
	if req.Version < 7 {
		return nil, fmt.Errorf("offsets of group %s: require_stable needs Kafka 2.5 or later, the client is set to %s",
			group, client.Config().Version)
	}
	req.RequireStable = true
	coordinator, err := client.Coordinator(group)
	if err != nil {
		return nil, fmt.Errorf("coordinator of group %s: %w", group, err)
	}
	resp, err := coordinator.FetchOffset(req)
	if err != nil {
		return nil, fmt.Errorf("offsets of group %s: %w", group, err)
	}
	if gerr := resp.GroupError(); !errors.Is(gerr, sarama.ErrNoError) {
		return nil, fmt.Errorf("offsets of group %s: %w", group, gerr)
	}
	blocks := resp.Blocks
	if len(resp.Groups) > 0 { // v8: one group's answer in its own list
		blocks = resp.Groups[0].Blocks
	}
	offs := make(map[string]map[int32]int64, len(parts))
	for topic, ps := range parts {
		offs[topic] = make(map[int32]int64, len(ps))
		for _, p := range ps {
			offs[topic][p] = -1
		}
	}
	for topic, bs := range blocks {
		for p, b := range bs {
			if b.Err != sarama.ErrNoError {
				return nil, fmt.Errorf("offset of group %s on %s/%d: %w", group, topic, p, b.Err)
			}
			if offs[topic] == nil {
				offs[topic] = map[int32]int64{}
			}
			offs[topic][p] = b.Offset
		}
	}
	return offs, nil
}
