package assign

import (
	"slices"
	"strings"
	"testing"

	"github.com/IBM/sarama"
)

// sub is what a member with standbys reports in its subscription.
type sub struct {
	host                 string
	generation           int32
	partitions, standbys []int32
	caughtUp             []int32
	inputFirst           bool
}

// subscriptions is members' subscriptions as the leader receives them.
func subscriptions(members map[string]sub) map[string]sarama.ConsumerGroupMemberMetadata {
	g := map[string]sarama.ConsumerGroupMemberMetadata{}
	for id, s := range members {
		g[id] = sarama.ConsumerGroupMemberMetadata{Topics: slices.Clone(subscribed), UserData: encode(userData{
			generation: s.generation, partitions: s.partitions, host: s.host, standbys: s.standbys, caughtUp: s.caughtUp,
			inputFirst: s.inputFirst})}
	}
	return g
}

// tell decodes what leader tells each of members of plan in generation 7,
// failing unless it tells each the partitions want(id).
func tell(t *testing.T, leader *Member, plan sarama.BalanceStrategyPlan, members map[string]sub, want func(id string) []int32) map[string]userData {
	t.Helper()
	told := map[string]userData{}
	for id := range members {
		b, err := leader.AssignmentData(id, plan[id], 7)
		if err != nil {
			t.Fatal(err)
		}
		d, err := decode(b)
		if err != nil {
			t.Fatalf("member %s: assignment data %x does not decode: %v", id, b, err)
		}
		if !slices.Equal(d.partitions, want(id)) || d.generation != 7 {
			t.Fatalf("member %s told partitions %v generation %d, owns %v", id, d.partitions, d.generation, want(id))
		}
		told[id] = d
	}
	return told
}

// leaderPlan runs the plan of a leader with replicas standbys over members
// and returns each member's partitions and what it is told.
func leaderPlan(t *testing.T, replicas int, n int32, members map[string]sub) (map[string][]int32, map[string]userData) {
	t.Helper()
	leader := NewMember("leader", replicas, nil, "")
	topics := topicsOf(n)
	plan, err := leader.Plan(subscriptions(members), topics)
	if err != nil {
		t.Fatal(err)
	}
	got := owned(t, plan, topics)
	return got, tell(t, leader, plan, members, func(id string) []int32 { return got[id] })
}

// Every partition gets one standby on another host, spread about evenly
// over the hosts; none on the owner's host.
func TestStandbyPlacement(t *testing.T) {
	members := map[string]sub{
		"a-0": {host: "a", generation: 3, partitions: span(0, 3)},
		"b-0": {host: "b", generation: 3, partitions: span(3, 6)},
		"c-0": {host: "c", generation: 3, partitions: span(6, 9)},
		"c-1": {host: "c", generation: 3, partitions: span(9, 12)}, // a second thread of c
	}
	got, told := leaderPlan(t, 1, 12, members)
	owner := map[int32]string{}
	for id, ps := range got {
		for _, p := range ps {
			owner[p] = id
		}
	}
	copies := map[int32]int{}
	perHost := map[string]int{}
	for id, d := range told {
		for _, p := range d.standbys {
			copies[p]++
			perHost[members[id].host]++
			if members[owner[p]].host == members[id].host {
				t.Errorf("partition %d: standby on %s, the owner %s's host", p, id, owner[p])
			}
		}
		if len(d.warmups) > 0 {
			t.Errorf("member %s: warm-ups %v with nobody joining", id, d.warmups)
		}
	}
	for p := range int32(12) {
		if copies[p] != 1 {
			t.Errorf("partition %d: %d standbys, want 1", p, copies[p])
		}
	}
	for h, n := range perHost {
		if n < 3 || n > 5 { // greedy, in partition order: not always 4 each
			t.Errorf("host %s holds %d standbys, want about 4 (%v)", h, n, perHost)
		}
	}
}

// With one host there is nowhere to put a standby.
func TestStandbyNeedsAnotherHost(t *testing.T) {
	_, told := leaderPlan(t, 1, 6, map[string]sub{
		"a-0": {host: "a", generation: 1, partitions: span(0, 3)},
		"a-1": {host: "a", generation: 1, partitions: span(3, 6)},
	})
	for id, d := range told {
		if len(d.standbys) > 0 {
			t.Errorf("member %s: standbys %v on the owner's host", id, d.standbys)
		}
	}
}

// A member that holds a standby keeps it, and the previous owner of a
// partition that moved is preferred as its standby.
func TestStandbysStay(t *testing.T) {
	members := map[string]sub{
		"a-0": {host: "a", generation: 2, partitions: []int32{0, 1}, standbys: []int32{2, 4}},
		"b-0": {host: "b", generation: 2, partitions: []int32{2, 3}, standbys: []int32{0, 5}},
		"c-0": {host: "c", generation: 2, partitions: []int32{4, 5}, standbys: []int32{1, 3}},
	}
	_, told := leaderPlan(t, 1, 6, members)
	for id, s := range members {
		for _, p := range s.standbys {
			if !slices.Contains(told[id].standbys, p) {
				t.Errorf("member %s lost its standby of %d: told %v", id, p, told[id].standbys)
			}
		}
	}
}

// A partition whose owner left goes to the member whose standby caught up,
// not to the first with room.
func TestOrphanGoesToItsCaughtUpStandby(t *testing.T) {
	// c left; its partitions 8..11 have caught-up standbys: 8, 9 on b, 10, 11 on a.
	members := map[string]sub{
		"a-0": {host: "a", generation: 5, partitions: span(0, 4), standbys: []int32{4, 5, 10, 11}, caughtUp: []int32{4, 5, 10, 11}},
		"b-0": {host: "b", generation: 5, partitions: span(4, 8), standbys: []int32{0, 1, 8, 9}, caughtUp: []int32{0, 1, 8, 9}},
	}
	got, _ := leaderPlan(t, 1, 12, members)
	want := map[string][]int32{"a-0": {0, 1, 2, 3, 10, 11}, "b-0": {4, 5, 6, 7, 8, 9}}
	for id, ps := range want {
		if !slices.Equal(got[id], ps) {
			t.Errorf("member %s owns %v, want %v", id, got[id], ps)
		}
	}
}

// A member that joins gets its share as warm-ups: the old owners keep the
// partitions until it reports them caught up, and the next plan moves them.
// Without standbys the join moves them at once.
func TestJoinWarmsUpFirst(t *testing.T) {
	old := map[string]sub{
		"a-0": {host: "a", generation: 4, partitions: span(0, 4)},
		"b-0": {host: "b", generation: 4, partitions: span(4, 8)},
		"c-0": {host: "c", generation: 4, partitions: span(8, 12)},
	}
	joined := func(caughtUp []int32) map[string]sub {
		m := map[string]sub{"d-0": {host: "d", standbys: caughtUp, caughtUp: caughtUp}}
		for id, s := range old {
			m[id] = s
		}
		return m
	}
	got, told := leaderPlan(t, 1, 12, joined(nil))
	for id, s := range old {
		if !slices.Equal(got[id], s.partitions) {
			t.Errorf("while d warms up, %s owns %v, want its %v", id, got[id], s.partitions)
		}
	}
	warm := told["d-0"].warmups
	if len(got["d-0"]) != 0 || len(warm) != 3 {
		t.Fatalf("d owns %v with warm-ups %v, want none and 3", got["d-0"], warm)
	}
	if !slices.Equal(told["d-0"].standbys[:0], []int32{}) || !isSubset(warm, told["d-0"].standbys) {
		t.Fatalf("d's warm-ups %v are not among its standbys %v", warm, told["d-0"].standbys)
	}

	got, told = leaderPlan(t, 1, 12, joined(warm))
	if !slices.Equal(got["d-0"], warm) {
		t.Fatalf("after catching up d owns %v, want its warm-ups %v", got["d-0"], warm)
	}
	if len(told["d-0"].warmups) != 0 {
		t.Errorf("d still told warm-ups %v", told["d-0"].warmups)
	}
	for _, p := range warm {
		prev := ""
		for id, s := range old {
			if slices.Contains(s.partitions, p) {
				prev = id
			}
		}
		if !slices.Contains(told[prev].standbys, p) {
			t.Errorf("partition %d moved from %s to d: want %s its standby, told %v", p, prev, prev, told[prev].standbys)
		}
	}

	got, _ = leaderPlan(t, 0, 12, joined(nil))
	if len(got["d-0"]) != 3 {
		t.Errorf("without standbys d owns %v at once, want 3 partitions", got["d-0"])
	}
}

func isSubset(a, b []int32) bool {
	for _, p := range a {
		if !slices.Contains(b, p) {
			return false
		}
	}
	return true
}

// User data round-trips, with and without the optional fields; damaged
// bytes are refused.
func TestUserDataRoundTrip(t *testing.T) {
	full := userData{generation: 9, partitions: []int32{1, 2}, host: "g-abc", standbys: []int32{3}, warmups: []int32{3}, caughtUp: []int32{},
		inputFirst: true, peer: "10.0.0.7:41234"}
	for _, d := range []userData{{generation: 9, partitions: []int32{1, 2}}, full, {host: "g-abc", peer: "10.0.0.7:41234"}} {
		b := encode(d)
		if b[0] != userDataVersion {
			t.Fatalf("version %d, want %d", b[0], userDataVersion)
		}
		got, err := decode(b)
		if err != nil || got.generation != d.generation || got.host != d.host || got.inputFirst != d.inputFirst || got.peer != d.peer ||
			!slices.Equal(got.partitions, d.partitions) || !slices.Equal(got.standbys, d.standbys) ||
			!slices.Equal(got.warmups, d.warmups) || len(got.caughtUp) != len(d.caughtUp) {
			t.Fatalf("decoded %+v, %v; want %+v", got, err, d)
		}
		for cut := 1; cut < len(b); cut++ {
			if _, err := decode(b[:cut]); err == nil {
				t.Errorf("%+v: decode of the first %d bytes accepted", d, cut)
			}
		}
		if _, err := decode(append(b, 0)); err == nil {
			t.Errorf("%+v: decode with a trailing byte accepted", d)
		}
	}
	if host, addr, ok := PeerOf(encode(full)); !ok || host != "g-abc" || addr != full.peer {
		t.Errorf("PeerOf: %q %q %v, want g-abc %s", host, addr, ok, full.peer)
	}
	noPeer := full
	noPeer.peer = ""
	if _, _, ok := PeerOf(encode(noPeer)); ok {
		t.Error("PeerOf found an address in user data that has none")
	}
	other := encode(full)
	other[0] = 3
	if _, _, ok := PeerOf(other); ok {
		t.Error("PeerOf read user data of another version")
	}
	if _, err := decode(other); err == nil || !strings.Contains(err.Error(), "version 3") {
		t.Errorf("decode of version 3: %v, want an error naming the version", err)
	}
}

// Each owner's standbys are split over the other hosts, even when one of
// them held them all: when the owner leaves, every survivor has room for
// the partitions it holds standbys of, and none is restored whole.
func TestStandbysOfOneOwnerAreSpread(t *testing.T) {
	members := map[string]sub{
		"a-0": {host: "a", generation: 2, partitions: span(0, 4)},
		"b-0": {host: "b", generation: 2, partitions: span(4, 8), standbys: []int32{0, 1, 2, 3, 8, 9}},
		"c-0": {host: "c", generation: 2, partitions: span(8, 12), standbys: []int32{4, 5, 6, 7, 10, 11}},
	}
	_, told := leaderPlan(t, 1, 12, members)
	for _, owner := range []string{"a-0", "b-0", "c-0"} {
		per := map[string]int{}
		for id, d := range told {
			for _, p := range d.standbys {
				if slices.Contains(members[owner].partitions, p) {
					per[id]++
				}
			}
		}
		for id, n := range per {
			if n != 2 {
				t.Errorf("%s's partitions: %d standbys on %s, want 2 on each other host (%v)", owner, n, id, per)
			}
		}
	}

	// a leaves; b and c report their standbys caught up.
	left := map[string]sub{}
	for _, id := range []string{"b-0", "c-0"} {
		s := members[id]
		s.standbys, s.caughtUp = told[id].standbys, told[id].standbys
		left[id] = s
	}
	got, _ := leaderPlan(t, 1, 12, left)
	for _, p := range members["a-0"].partitions {
		var to string
		for id, ps := range got {
			if slices.Contains(ps, p) {
				to = id
			}
		}
		if !slices.Contains(told[to].standbys, p) {
			t.Errorf("a's partition %d went to %s, which held no standby of it", p, to)
		}
	}
}

// With input-first members, a member that joins consumes its warm-ups'
// inputs at once while the old owners keep their tables and loop
// partitions; once it reports them caught up it owns them whole. A group
// with one member that cannot forward plans as before, and so does one
// without standbys.
func TestJoinTakesInputsFirst(t *testing.T) {
	const loop = "group-loop"
	old := map[string]sub{
		"a-0": {host: "a", generation: 4, partitions: span(0, 4)},
		"b-0": {host: "b", generation: 4, partitions: span(4, 8)},
		"c-0": {host: "c", generation: 4, partitions: span(8, 12)},
	}
	plan := func(replicas int, caughtUp []int32, canForward func(id string) bool) (sarama.BalanceStrategyPlan, map[string]userData) {
		t.Helper()
		members := map[string]sub{"d-0": {host: "d", standbys: caughtUp, caughtUp: caughtUp}}
		for id, s := range old {
			members[id] = s
		}
		for id, s := range members {
			s.inputFirst = canForward(id)
			members[id] = s
		}
		leader := NewMember("leader", replicas, nil, loop)
		p, err := leader.Plan(subscriptions(members), topicsOf(12))
		if err != nil {
			t.Fatal(err)
		}
		told := tell(t, leader, p, members, func(id string) []int32 { return slices.Sorted(slices.Values(p[id][loop])) })
		// Every partition of every topic is assigned once.
		for _, topic := range subscribed {
			seen := map[int32]string{}
			for id, byTopic := range p {
				for _, part := range byTopic[topic] {
					if other, dup := seen[part]; dup {
						t.Fatalf("%s/%d assigned to %s and %s", topic, part, other, id)
					}
					seen[part] = id
				}
			}
			if len(seen) != 12 {
				t.Fatalf("%s: %d of 12 partitions assigned", topic, len(seen))
			}
		}
		return p, told
	}
	all := func(string) bool { return true }

	p, told := plan(1, nil, all)
	warm := told["d-0"].warmups
	if len(warm) != 3 || len(p["d-0"][loop]) != 0 || !slices.Equal(slices.Sorted(slices.Values(p["d-0"]["in"])), warm) {
		t.Fatalf("d owns loop %v and inputs %v with warm-ups %v, want no loop partition and its 3 warm-ups' inputs",
			p["d-0"][loop], p["d-0"]["in"], warm)
	}
	for id, s := range old {
		if got := slices.Sorted(slices.Values(p[id][loop])); !slices.Equal(got, s.partitions) {
			t.Errorf("while d warms up, %s owns loop partitions %v, want its %v", id, got, s.partitions)
		}
		for _, part := range p[id]["in"] {
			if slices.Contains(warm, part) {
				t.Errorf("%s still consumes input partition %d that d warms up", id, part)
			}
		}
	}

	p, told = plan(1, warm, all)
	if got := slices.Sorted(slices.Values(p["d-0"][loop])); !slices.Equal(got, warm) ||
		!slices.Equal(slices.Sorted(slices.Values(p["d-0"]["in"])), warm) || len(told["d-0"].warmups) != 0 {
		t.Fatalf("after catching up d owns loop %v and inputs %v, warm-ups %v; want both its former warm-ups %v and none",
			got, p["d-0"]["in"], told["d-0"].warmups, warm)
	}

	for name, tc := range map[string]struct {
		replicas   int
		canForward func(string) bool
	}{
		"one member cannot forward": {1, func(id string) bool { return id != "b-0" }},
		"no standbys":               {0, all},
	} {
		p, _ := plan(tc.replicas, nil, tc.canForward)
		for id, byTopic := range p {
			if in, l := slices.Sorted(slices.Values(byTopic["in"])), slices.Sorted(slices.Values(byTopic[loop])); !slices.Equal(in, l) {
				t.Errorf("%s: %s consumes inputs %v and loop partitions %v, want the same", name, id, in, l)
			}
		}
	}
}

// A member says it can forward only with standbys and a loop topic, and
// remembers its tables, the loop topic's partitions, as its partitions:
// the input partitions of a warm-up are not claimed as its own.
func TestMemberInputFirst(t *testing.T) {
	for _, tc := range []struct {
		replicas int
		loop     string
		want     bool
	}{{1, "group-loop", true}, {0, "group-loop", false}, {1, "", false}} {
		m := NewMember("g-a", tc.replicas, nil, tc.loop)
		b, err := m.SubscriptionUserData(subscribed)
		if err != nil {
			t.Fatal(err)
		}
		if d, err := decode(b); err != nil || d.inputFirst != tc.want {
			t.Errorf("replicas %d, loop topic %q: subscription says input-first %v (%v), want %v", tc.replicas, tc.loop, d.inputFirst, err, tc.want)
		}
	}
	m := NewMember("g-a", 1, nil, "group-loop")
	m.OnAssignment(&sarama.ConsumerGroupMemberAssignment{Topics: map[string][]int32{"in": {5, 1, 2}, "group-loop": {2, 1}}}, 3)
	b, _ := m.SubscriptionUserData(subscribed)
	if d, _ := decode(b); !slices.Equal(d.partitions, []int32{1, 2}) || d.generation != 3 {
		t.Errorf("after inputs [1 2 5] and loop partitions [1 2] the member claims %v in generation %d, want [1 2] in 3", d.partitions, d.generation)
	}
}
