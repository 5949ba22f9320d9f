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
	"encoding/binary"
	"fmt"
	"slices"
	"sort"

	"github.com/IBM/sarama"
)

// Name is the strategy's group protocol name. Members of a group agree on a
// protocol every one of them lists, so a member that lists this one first
// and goka's "copartition" second forms a group with members that know only
// goka's.
const Name = "dedup-copartitioned-sticky"

// Sticky is the strategy; it holds no state.
var Sticky sarama.BalanceStrategy = sticky{}

type sticky struct{}

func (sticky) Name() string { return Name }

// Plan assigns every partition of every subscribed topic to exactly one
// member, the same partition numbers of every topic to a member.
func (sticky) Plan(members map[string]sarama.ConsumerGroupMemberMetadata, topics map[string][]int32) (sarama.BalanceStrategyPlan, error) {
	names, partitions, err := copartitioned(topics)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(members))
	for id, meta := range members {
		if !sameTopics(names, meta.Topics) {
			return nil, fmt.Errorf("assign: member %s subscribes to %v, the group to %v: every member must subscribe to the same topics", id, meta.Topics, names)
		}
		ids = append(ids, id)
	}
	sort.Strings(ids)
	plan := sarama.BalanceStrategyPlan{}
	if len(ids) == 0 || len(partitions) == 0 {
		return plan, nil
	}
	owned := distribute(ids, partitions, claims(ids, members, partitions))
	for _, id := range ids {
		for _, topic := range names {
			plan.Add(id, topic, owned[id]...)
		}
	}
	return plan, nil
}

// AssignmentData is what the member sends back in its next JoinGroup: its
// partitions and the generation that gave them, which settles a partition
// two members claim (stale user data of a member that lost it).
func (sticky) AssignmentData(_ string, topics map[string][]int32, generationID int32) ([]byte, error) {
	var parts []int32
	for _, ps := range topics {
		parts = append(parts, ps...)
	}
	slices.Sort(parts)
	return encode(userData{generation: generationID, partitions: slices.Compact(parts)}), nil
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
func claims(ids []string, members map[string]sarama.ConsumerGroupMemberMetadata, partitions []int32) map[string][]int32 {
	type claim struct {
		member     string
		generation int32
	}
	winner := map[int32]claim{}
	for _, id := range ids {
		d, ok := decode(members[id].UserData)
		if !ok {
			continue // first join, goka's strategy before, or a format this version does not read
		}
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

// distribute gives each member floor or ceil of len(partitions)/len(ids):
// first what it claims, up to its quota, then unclaimed partitions in
// order, filling members in ids order. The ceil quotas go to the members
// claiming the most, so the most claims are kept. With no claims at all
// (a new group, or the first generation after goka's strategy) it is
// goka's range layout: switching strategies moves nothing.
func distribute(ids []string, partitions []int32, claimed map[string][]int32) map[string][]int32 {
	if len(claimed) == 0 {
		return ranges(ids, partitions)
	}
	quota := quotas(ids, len(partitions), claimed)
	owned := make(map[string][]int32, len(ids))
	taken := map[int32]bool{}
	for _, id := range ids {
		keep := claimed[id][:min(len(claimed[id]), quota[id])]
		owned[id] = slices.Clone(keep)
		for _, p := range keep {
			taken[p] = true
		}
	}
	i := 0
	for _, p := range partitions {
		if taken[p] {
			continue
		}
		for len(owned[ids[i]]) >= quota[ids[i]] {
			i++
		}
		owned[ids[i]] = append(owned[ids[i]], p)
	}
	for _, id := range ids {
		slices.Sort(owned[id])
	}
	return owned
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

// userData is a member's previous assignment: version 1, then the
// generation and the partition numbers, big-endian int32s.
type userData struct {
	generation int32
	partitions []int32
}

const userDataVersion = 1

func encode(d userData) []byte {
	b := make([]byte, 0, 1+4+4+4*len(d.partitions))
	b = append(b, userDataVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(d.generation))
	b = binary.BigEndian.AppendUint32(b, uint32(len(d.partitions)))
	for _, p := range d.partitions {
		b = binary.BigEndian.AppendUint32(b, uint32(p))
	}
	return b
}

// decode reads user data encode wrote; false for anything else, which Plan
// takes as a member without previous partitions: the assignment stays
// correct, only less sticky.
func decode(b []byte) (userData, bool) {
	if len(b) < 9 || b[0] != userDataVersion {
		return userData{}, false
	}
	d := userData{generation: int32(binary.BigEndian.Uint32(b[1:]))}
	n := binary.BigEndian.Uint32(b[5:])
	if uint64(len(b)-9) != 4*uint64(n) {
		return userData{}, false
	}
	d.partitions = make([]int32, n)
	for i := range d.partitions {
		d.partitions[i] = int32(binary.BigEndian.Uint32(b[9+4*i:]))
	}
	return d, true
}
