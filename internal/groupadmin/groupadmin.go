// Package groupadmin holds the replay operations on a consumer group:
// moving its input offsets and deleting its table. Both refuse while the
// group has live members, since a running worker would overwrite the offsets
// with its next commit and keep using the table.
package groupadmin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/kafkautil"
)

// ErrGroupActive is returned while the group has members.
var ErrGroupActive = errors.New("group has live members; stop every worker of the group first")

// Target says where reset-offsets moves the group.
type Target struct {
	Kind   string // earliest, latest, datetime, offset
	Time   time.Time
	Offset int64
}

// ParseTarget reads earliest | latest | datetime=<RFC 3339> | offset=<n>.
func ParseTarget(s string) (Target, error) {
	switch {
	case s == "earliest" || s == "latest":
		return Target{Kind: s}, nil
	case strings.HasPrefix(s, "datetime="):
		t, err := time.Parse(time.RFC3339, strings.TrimPrefix(s, "datetime="))
		if err != nil {
			return Target{}, fmt.Errorf("%q: want datetime=2026-12-01T00:00:00Z: %w", s, err)
		}
		return Target{Kind: "datetime", Time: t}, nil
	case strings.HasPrefix(s, "offset="):
		n, err := strconv.ParseInt(strings.TrimPrefix(s, "offset="), 10, 64)
		if err != nil || n < 0 {
			return Target{}, fmt.Errorf("%q: want offset=<non-negative number>", s)
		}
		return Target{Kind: "offset", Offset: n}, nil
	}
	return Target{}, fmt.Errorf("%q: want earliest, latest, datetime=<RFC 3339> or offset=<n>", s)
}

// Move is one partition's planned change; Current is -1 when the group has
// no committed offset there.
type Move struct {
	Partition    int32
	Current, New int64
}

// CheckInactive fails with ErrGroupActive while group has members.
func CheckInactive(admin sarama.ClusterAdmin, group string) error {
	desc, err := admin.DescribeConsumerGroups([]string{group})
	if err != nil {
		return fmt.Errorf("describe group %s: %w", group, err)
	}
	for _, d := range desc {
		if len(d.Members) > 0 {
			return fmt.Errorf("%w (group %s is %s with %d members)", ErrGroupActive, group, d.State, len(d.Members))
		}
	}
	return nil
}

// Plan computes the new offset of every partition of topic. The current
// offsets are read as a joining member reads them (require_stable), so a
// commit that has just ended is not reported as the offset before it; an
// open transaction of the group's holds the read up until it ends or ctx
// does.
func Plan(ctx context.Context, client sarama.Client, group, topic string, to Target) ([]Move, error) {
	parts, err := client.Partitions(topic)
	if err != nil {
		return nil, fmt.Errorf("partitions of %s: %w", topic, err)
	}
	slices.Sort(parts)
	current, err := kafkautil.StableOffsets(ctx, client, group, map[string][]int32{topic: parts})
	if err != nil {
		return nil, err
	}
	var moves []Move
	for _, p := range parts {
		mv := Move{Partition: p, Current: current[topic][p]}
		start, err := client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			return nil, err
		}
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return nil, err
		}
		switch to.Kind {
		case "earliest":
			mv.New = start
		case "latest":
			mv.New = end
		case "offset":
			mv.New = min(max(to.Offset, start), end)
		case "datetime":
			off, err := client.GetOffset(topic, p, to.Time.UnixMilli())
			if err != nil {
				return nil, err
			}
			if off < 0 { // nothing at or after that time
				off = end
			}
			mv.New = off
		}
		moves = append(moves, mv)
	}
	return moves, nil
}

// CommittedTopics lists, sorted, the topics on which group has committed
// offsets.
func CommittedTopics(ctx context.Context, client sarama.Client, group string) ([]string, error) {
	offs, err := kafkautil.StableOffsets(ctx, client, group, nil) // nil: every topic
	if err != nil {
		return nil, err
	}
	var topics []string
	for topic, parts := range offs {
		for _, off := range parts {
			if off >= 0 {
				topics = append(topics, topic)
				break
			}
		}
	}
	slices.Sort(topics)
	return topics, nil
}

// Apply commits the planned offsets for group, which must be inactive.
func Apply(client sarama.Client, group, topic string, moves []Move) error {
	om, err := sarama.NewOffsetManagerFromClient(group, client)
	if err != nil {
		return err
	}
	defer om.Close()
	for _, mv := range moves {
		pom, err := om.ManagePartition(topic, mv.Partition)
		if err != nil {
			return fmt.Errorf("partition %d: %w", mv.Partition, err)
		}
		// ResetOffset only moves back, MarkOffset only forward.
		if next, _ := pom.NextOffset(); mv.New < next {
			pom.ResetOffset(mv.New, "reset-offsets")
		} else {
			pom.MarkOffset(mv.New, "reset-offsets")
		}
		defer pom.Close()
	}
	om.Commit()
	return nil
}
