// Package assign is the consumer-group assignment strategy of the
// exactly-once runtime: copartitioned like goka's CopartitioningStrategy (a
// member that gets partition p of one subscribed topic gets p of every one,
// so one table store serves it), balanced (member sizes differ by at most
// one), and sticky: a member keeps the partitions it owned before, up to its
// share, so a member joining or leaving moves only the partitions that must
// move. Every moved partition costs its new owner a table restore from the
// changelog; goka's range-like layout moves partitions between members that
// stay, and restores them for nothing.
//
// A member's previous partitions travel in the assignment's user data: the
// group leader writes them with the generation (AssignmentData), sarama
// keeps them and sends them back in the member's next JoinGroup, and the
// next leader reads them in Plan.
package assign

import (
	"fmt"
	"slices"
	"sort"

	"github.com/IBM/sarama"
)

// Name is the strategy's group protocol name.
const Name = "dedup-copartitioned-sticky"

// Sticky is the strategy; it holds no state.
var Sticky sarama.BalanceStrategy = sticky{}

type sticky struct{}

func (sticky) Name() string { return Name }

// Plan assigns every partition of every subscribed topic to exactly one
// member, the same partition numbers of every topic to a member.
func (sticky) Plan(members map[string]sarama.ConsumerGroupMemberMetadata, topics map[string][]int32) (sarama.BalanceStrategyPlan, error) {
	plan, _, err := makePlan(members, topics, 0, "")
	return plan, err
}

// makePlan is Plan with replicas standby replicas per partition (plan.go);
// it also returns what each member is told (AssignmentData). loopTopic,
// when not "", is the topic whose partitions are the tables': with
// standbys, and when every member says it can (userData.inputFirst), a
// warm-up's input partitions go to the member warming up at once
// (groupPlan.inputs).
func makePlan(members map[string]sarama.ConsumerGroupMemberMetadata, topics map[string][]int32, replicas int, loopTopic string) (sarama.BalanceStrategyPlan, map[string]userData, error) {
	names, partitions, err := copartitioned(topics)
	if err != nil {
		return nil, nil, err
	}
	ids := make([]string, 0, len(members))
	subs := make(map[string]userData, len(members))
	for id, meta := range members {
		if !sameTopics(names, meta.Topics) {
			return nil, nil, fmt.Errorf("assign: member %s subscribes to %v, the group to %v: every member must subscribe to the same topics", id, meta.Topics, names)
		}
		ids = append(ids, id)
		d := userData{generation: -1} // first join: no previous assignment
		if len(meta.UserData) > 0 {
			if d, err = decode(meta.UserData); err != nil {
				return nil, nil, fmt.Errorf("assign: member %s: %w", id, err)
			}
		}
		if d.host == "" {
			d.host = id
		}
		subs[id] = d
	}
	sort.Strings(ids)
	inputFirst := replicas > 0 && slices.Contains(names, loopTopic)
	for _, id := range ids {
		inputFirst = inputFirst && subs[id].inputFirst
	}
	plan := sarama.BalanceStrategyPlan{}
	told := make(map[string]userData, len(ids))
	if len(ids) == 0 || len(partitions) == 0 {
		return plan, told, nil
	}
	g := &groupPlan{ids: ids, subs: subs, partitions: partitions, replicas: replicas}
	g.distribute()
	g.placeStandbys()
	inputs := g.owned
	if inputFirst {
		inputs = g.inputs()
	}
	for _, id := range ids {
		for _, topic := range names {
			if topic == loopTopic {
				plan.Add(id, topic, g.owned[id]...)
			} else {
				plan.Add(id, topic, inputs[id]...)
			}
		}
		if _, ok := plan[id]; !ok && len(g.standbys[id]) > 0 {
			// sarama asks AssignmentData only for the members in the
			// plan, and one warming up has standbys to hear of.
			plan[id] = map[string][]int32{}
		}
		told[id] = userData{partitions: g.owned[id], standbys: g.standbys[id], warmups: g.warmups[id]}
	}
	return plan, told, nil
}

// AssignmentData is what the member sends back in its next JoinGroup: its
// partitions and the generation that gave them, which settles a partition
// two members claim (stale user data of a member that lost it).
func (sticky) AssignmentData(_ string, topics map[string][]int32, generationID int32) ([]byte, error) {
	return encode(userData{generation: generationID, partitions: partitionsOf(topics, "")}), nil
}

// partitionsOf is the sorted partition numbers of a copartitioned
// assignment, each once. With a loopTopic, they are the loop topic's: the
// tables a member owns, which an input-first plan assigns apart from the
// inputs (a member warming up gets inputs and no table).
func partitionsOf(topics map[string][]int32, loopTopic string) []int32 {
	if loopTopic != "" {
		return slices.Sorted(slices.Values(topics[loopTopic]))
	}
	var parts []int32
	for _, ps := range topics {
		parts = append(parts, ps...)
	}
	slices.Sort(parts)
	return slices.Compact(parts)
}

// copartitioned returns the sorted topic names and their one partition
// list, or an error when two topics differ: no member could hold partition
// p of both.
func copartitioned(topics map[string][]int32) ([]string, []int32, error) {
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	sort.Strings(names)
	var partitions []int32
	for i, t := range names {
		ps := slices.Clone(topics[t])
		slices.Sort(ps)
		if i == 0 {
			partitions = ps
			continue
		}
		if !slices.Equal(ps, partitions) {
			return nil, nil, fmt.Errorf("assign: topic %s has %d partitions, %s has %d: the topics of a copartitioned group need the same partitions",
				t, len(ps), names[0], len(partitions))
		}
	}
	return names, partitions, nil
}

func sameTopics(want []string, got []string) bool {
	got = slices.Clone(got)
	slices.Sort(got)
	return slices.Equal(want, slices.Compact(got))
}

// claims reads each member's previous partitions from its user data and
// gives each partition claimed by several members to one: the claim of the
// higher generation (the later owner), then of the lower member ID.
// Partitions the topics no longer have are dropped. Members are in ids
// order, so the lower ID wins a tie by coming first.
func claims(ids []string, subs map[string]userData, partitions []int32) map[string][]int32 {
	type claim struct {
		member     string
		generation int32
	}
	winner := map[int32]claim{}
	for _, id := range ids {
		d := subs[id]
		for _, p := range d.partitions {
			if _, known := slices.BinarySearch(partitions, p); !known {
				continue
			}
			if w, taken := winner[p]; taken && w.generation >= d.generation {
				continue
			}
			winner[p] = claim{member: id, generation: d.generation}
		}
	}
	out := map[string][]int32{}
	for _, p := range partitions {
		if w, ok := winner[p]; ok {
			out[w.member] = append(out[w.member], p)
		}
	}
	return out
}

// quotas gives len(partitions) % len(ids) members one partition more than
// the others: those claiming the most, then the lower IDs.
func quotas(ids []string, partitions int, claimed map[string][]int32) map[string]int {
	base, extra := partitions/len(ids), partitions%len(ids)
	byClaims := slices.Clone(ids)
	sort.SliceStable(byClaims, func(i, j int) bool { return len(claimed[byClaims[i]]) > len(claimed[byClaims[j]]) })
	quota := make(map[string]int, len(ids))
	for i, id := range byClaims {
		quota[id] = base
		if i < extra {
			quota[id]++
		}
	}
	return quota
}

// ranges is goka's CopartitioningStrategy layout: member i of the sorted
// IDs gets partitions [round(i*step), round((i+1)*step)).
func ranges(ids []string, partitions []int32) map[string][]int32 {
	owned := make(map[string][]int32, len(ids))
	step := float64(len(partitions)) / float64(len(ids))
	for i, id := range ids {
		lo, hi := int(float64(i)*step+0.5), int(float64(i+1)*step+0.5)
		owned[id] = slices.Clone(partitions[lo:hi])
	}
	return owned
}
