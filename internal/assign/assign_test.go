package assign

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/IBM/sarama"
)

var subscribed = []string{"in", "group-loop"}

// topicsOf is every subscribed topic with partitions 0..n-1.
func topicsOf(n int32) map[string][]int32 {
	t := map[string][]int32{}
	for _, name := range subscribed {
		for p := range n {
			t[name] = append(t[name], p)
		}
	}
	return t
}

// prev is a member's previous assignment; nil: none (first join).
type prev struct {
	generation int32
	partitions []int32
}

func group(members map[string]*prev) map[string]sarama.ConsumerGroupMemberMetadata {
	g := map[string]sarama.ConsumerGroupMemberMetadata{}
	for id, p := range members {
		meta := sarama.ConsumerGroupMemberMetadata{Topics: slices.Clone(subscribed)}
		if p != nil {
			meta.UserData = encode(userData{generation: p.generation, partitions: p.partitions})
		}
		g[id] = meta
	}
	return g
}

// owned checks that plan assigns every partition of every topic once, the
// same partitions of every topic to a member, and returns them per member.
func owned(t *testing.T, plan sarama.BalanceStrategyPlan, topics map[string][]int32) map[string][]int32 {
	t.Helper()
	out := map[string][]int32{}
	for id, byTopic := range plan {
		var first []int32
		for i, name := range slices.Sorted(maps.Keys(byTopic)) {
			ps := slices.Sorted(slices.Values(byTopic[name]))
			if i == 0 {
				first = ps
			} else if !slices.Equal(ps, first) {
				t.Fatalf("member %s: %s %v, %s %v: not copartitioned", id, name, ps, slices.Sorted(maps.Keys(byTopic))[0], first)
			}
		}
		if len(byTopic) != len(topics) && len(first) > 0 {
			t.Fatalf("member %s gets %d of %d topics", id, len(byTopic), len(topics))
		}
		out[id] = first
	}
	for name, ps := range topics {
		seen := map[int32]int{}
		for _, byTopic := range plan {
			for _, p := range byTopic[name] {
				seen[p]++
			}
		}
		for _, p := range ps {
			if seen[p] != 1 {
				t.Fatalf("%s partition %d assigned %d times", name, p, seen[p])
			}
		}
		if len(seen) != len(ps) {
			t.Fatalf("%s: %d partitions assigned, the topic has %d", name, len(seen), len(ps))
		}
	}
	return out
}

// balanced fails unless the members' sizes differ by at most one; a member
// without partitions is not in the plan and counts as 0.
func balanced(t *testing.T, members int, got map[string][]int32) {
	t.Helper()
	lo, hi := 1<<30, 0
	for _, ps := range got {
		lo, hi = min(lo, len(ps)), max(hi, len(ps))
	}
	if len(got) < members {
		lo = 0
	}
	if hi-lo > 1 {
		t.Fatalf("sizes from %d to %d: not balanced: %v", lo, hi, got)
	}
}

func span(from, to int32) []int32 {
	var out []int32
	for p := from; p < to; p++ {
		out = append(out, p)
	}
	return out
}

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name       string
		partitions int32
		members    map[string]*prev
		want       map[string][]int32
	}{{
		name: "first join: goka's range layout", partitions: 12,
		members: map[string]*prev{"a": nil, "b": nil, "c": nil},
		want:    map[string][]int32{"a": span(0, 4), "b": span(4, 8), "c": span(8, 12)},
	}, {
		// Goka's layout would give the new member, first by ID, 0-2, and
		// a 3-5, b 6-8, c 9-11: six partitions between the old members.
		name: "a member joins: 3 partitions move to it, none between the others", partitions: 12,
		members: map[string]*prev{"a": {1, span(0, 4)}, "b": {1, span(4, 8)}, "c": {1, span(8, 12)}, "0new": nil},
		want:    map[string][]int32{"a": span(0, 3), "b": span(4, 7), "c": span(8, 11), "0new": {3, 7, 11}},
	}, {
		name: "a member leaves: only its partitions move", partitions: 12,
		members: map[string]*prev{"a": {2, span(0, 3)}, "b": {2, span(3, 6)}, "d": {2, span(9, 12)}},
		want:    map[string][]int32{"a": {0, 1, 2, 6}, "b": {3, 4, 5, 7}, "d": {8, 9, 10, 11}},
	}, {
		name: "uneven: the larger shares stay with the members that had more", partitions: 10,
		members: map[string]*prev{"a": {1, span(0, 3)}, "b": {1, span(3, 6)}, "c": {1, span(6, 10)}, "d": nil},
		want:    map[string][]int32{"a": {0, 1, 2}, "b": {3, 4}, "c": {6, 7, 8}, "d": {5, 9}},
	}, {
		name: "claimed twice: the higher generation wins", partitions: 4,
		members: map[string]*prev{"a": {5, []int32{1, 2, 3}}, "b": {3, []int32{0, 1}}},
		want:    map[string][]int32{"a": {1, 2}, "b": {0, 3}},
	}, {
		name: "claimed twice in one generation: the lower member ID wins", partitions: 4,
		members: map[string]*prev{"a": {4, []int32{2}}, "b": {4, []int32{0, 2}}},
		want:    map[string][]int32{"a": {1, 2}, "b": {0, 3}},
	}, {
		name: "partitions the topics no longer have are ignored", partitions: 4,
		members: map[string]*prev{"a": {1, span(0, 8)}, "b": {1, span(8, 16)}},
		want:    map[string][]int32{"a": {0, 1}, "b": {2, 3}},
	}, {
		name: "members without a previous assignment fill up", partitions: 6,
		members: map[string]*prev{"a": nil, "b": {7, []int32{5}}, "c": nil},
		want:    map[string][]int32{"a": {0, 1}, "b": {2, 5}, "c": {3, 4}},
	}, {
		name: "more members than partitions", partitions: 2,
		members: map[string]*prev{"a": {1, []int32{1}}, "b": nil, "c": {1, []int32{0}}},
		want:    map[string][]int32{"a": {1}, "c": {0}},
	}, {
		name: "one member", partitions: 3,
		members: map[string]*prev{"a": {9, []int32{2}}},
		want:    map[string][]int32{"a": {0, 1, 2}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			topics := topicsOf(tc.partitions)
			plan, err := Sticky.Plan(group(tc.members), topics)
			if err != nil {
				t.Fatal(err)
			}
			got := owned(t, plan, topics)
			balanced(t, len(tc.members), got)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPlanRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		topics  map[string][]int32
		members map[string]sarama.ConsumerGroupMemberMetadata
		want    string
	}{{
		name:    "topics of different partition counts",
		topics:  map[string][]int32{"in": span(0, 12), "group-loop": span(0, 6)},
		members: map[string]sarama.ConsumerGroupMemberMetadata{"a": {Topics: subscribed}},
		want:    "need the same partitions",
	}, {
		name:   "members subscribing to different topics",
		topics: topicsOf(4),
		members: map[string]sarama.ConsumerGroupMemberMetadata{"a": {Topics: subscribed},
			"b": {Topics: []string{"in"}}},
		want: "every member must subscribe to the same topics",
	}, {
		name:   "user data of another version",
		topics: topicsOf(4),
		members: map[string]sarama.ConsumerGroupMemberMetadata{"a": {Topics: subscribed},
			"b": {Topics: subscribed, UserData: []byte{3, 0, 0, 0, 1, 0, 0, 0, 0}}},
		want: "member b: user data of version 3, and this build reads version 4 only",
	}, {
		name:   "user data that does not decode",
		topics: topicsOf(4),
		members: map[string]sarama.ConsumerGroupMemberMetadata{"a": {Topics: subscribed},
			"b": {Topics: subscribed, UserData: append(encode(userData{generation: 1}), 0)}},
		want: "member b: user data of 27 bytes: 1 left over after the fields of version 4",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Sticky.Plan(tc.members, tc.topics)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestUserData(t *testing.T) {
	b, err := Sticky.AssignmentData("a", map[string][]int32{"in": {7, 3}, "group-loop": {3, 7}}, 42)
	if err != nil {
		t.Fatal(err)
	}
	d, err := decode(b)
	if err != nil || d.generation != 42 || !slices.Equal(d.partitions, []int32{3, 7}) {
		t.Fatalf("decoded %+v, %v; want generation 42, partitions [3 7]", d, err)
	}
	for _, bad := range [][]byte{nil, {}, {userDataVersion, 0, 0}, {1, 0, 0, 0, 1, 0, 0, 0, 0}, append(slices.Clone(b), 0)} {
		if d, err := decode(bad); err == nil {
			t.Errorf("decode(%v) = %+v, want refused", bad, d)
		}
	}
}

// TestPlanProperties runs random groups with random, partly stale and
// conflicting, previous assignments: every plan assigns each partition of
// each topic once, copartitioned and balanced, keeps as many previous
// owners as any balanced plan can, and is the same however the member map
// iterates.
func TestPlanProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		partitions := rng.Int32N(30) + 1
		n := rng.IntN(9) + 1
		members := map[string]*prev{}
		for i := range n {
			id := fmt.Sprintf("m%02d", rng.IntN(100))
			if rng.IntN(4) == 0 {
				members[id] = nil
				continue
			}
			p := &prev{generation: rng.Int32N(4)}
			for q := range partitions + 3 { // a few it no longer has
				if rng.IntN(n+i%2) == 0 {
					p.partitions = append(p.partitions, q)
				}
			}
			members[id] = p
		}
		topics := topicsOf(partitions)
		plan, err := Sticky.Plan(group(members), topics)
		if err != nil {
			t.Fatal(err)
		}
		got := owned(t, plan, topics)
		balanced(t, len(members), got)
		if kept, best := keptOwners(members, partitions, got); kept != best {
			t.Fatalf("members %v, %d partitions: plan %v keeps %d previous owners, a balanced plan can keep %d",
				describe(members), partitions, got, kept, best)
		}
		again, err := Sticky.Plan(group(members), topics)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(plan, again) {
			t.Fatalf("members %v: two plans differ: %v, %v", describe(members), plan, again)
		}
	}
}

// keptOwners counts the partitions got leaves with their previous owner
// (of two claims the higher generation, then the lower ID) and the most
// any balanced plan can leave: each member keeps at most its share, and
// only len % members shares are one larger.
func keptOwners(members map[string]*prev, partitions int32, got map[string][]int32) (kept, best int) {
	owner := map[int32]string{}
	gen := map[int32]int32{}
	for _, id := range slices.Sorted(maps.Keys(members)) {
		m := members[id]
		if m == nil {
			continue
		}
		for _, p := range m.partitions {
			if p >= partitions {
				continue
			}
			if _, ok := owner[p]; !ok || m.generation > gen[p] {
				owner[p], gen[p] = id, m.generation
			}
		}
	}
	claims := map[string]int{}
	for _, id := range owner {
		claims[id]++
	}
	for id, ps := range got {
		for _, p := range ps {
			if owner[p] == id {
				kept++
			}
		}
	}
	share, extra := int(partitions)/len(members), int(partitions)%len(members)
	over := 0
	for _, c := range claims {
		best += min(c, share)
		if c > share {
			over++
		}
	}
	return kept, best + min(extra, over)
}

func describe(members map[string]*prev) string {
	var b strings.Builder
	for _, id := range slices.Sorted(maps.Keys(members)) {
		if m := members[id]; m == nil {
			fmt.Fprintf(&b, "%s:new ", id)
		} else {
			fmt.Fprintf(&b, "%s:g%d%v ", id, m.generation, m.partitions)
		}
	}
	return b.String()
}

// TestRebalances replays joins and leaves the way sarama carries the
// assignment: each member's next user data is the AssignmentData the
// leader gave it. A join moves partitions only to the new member, a leave
// only the leaver's, and never more than balance needs.
func TestRebalances(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		partitions := rng.Int32N(40) + 1
		topics := topicsOf(partitions)
		userData := map[string][]byte{}
		var prevOwned map[string][]int32
		for gen := int32(1); gen <= 30; gen++ {
			join := len(userData) < 2 || (len(userData) < 10 && rng.IntN(2) == 0)
			var changed string
			if join {
				changed = fmt.Sprintf("m%03d", rng.IntN(1000))
				for userData[changed] != nil {
					changed = fmt.Sprintf("m%03d", rng.IntN(1000))
				}
				userData[changed] = []byte{}
			} else {
				ids := slices.Sorted(maps.Keys(userData))
				changed = ids[rng.IntN(len(ids))]
				delete(userData, changed)
			}
			members := map[string]sarama.ConsumerGroupMemberMetadata{}
			for id, ud := range userData {
				members[id] = sarama.ConsumerGroupMemberMetadata{Topics: subscribed, UserData: ud}
			}
			plan, err := Sticky.Plan(members, topics)
			if err != nil {
				t.Fatal(err)
			}
			got := owned(t, plan, topics)
			balanced(t, len(members), got)
			moved := 0
			for id, ps := range got {
				for _, p := range ps {
					if prevOwned == nil || slices.Contains(prevOwned[id], p) {
						continue
					}
					moved++
					from := ""
					for o, ops := range prevOwned {
						if slices.Contains(ops, p) {
							from = o
						}
					}
					if join && id != changed {
						t.Fatalf("gen %d: %s joined, yet partition %d moved from %s to %s", gen, changed, p, from, id)
					}
					if !join && from != changed && from != "" {
						t.Fatalf("gen %d: %s left, yet partition %d moved from %s to %s", gen, changed, p, from, id)
					}
				}
			}
			if join && prevOwned != nil && moved != len(got[changed]) {
				t.Fatalf("gen %d: %d moved, the new member has %d", gen, moved, len(got[changed]))
			}
			for id := range userData {
				userData[id], _ = Sticky.AssignmentData(id, plan[id], gen)
			}
			prevOwned = got
		}
	}
}
