package assign

import (
	"slices"
)

// groupPlan is one plan in the making: who owns each partition, and, with
// standby replicas, who keeps a copy of its table up to date.
//
// Standby replicas (replicas > 0) change two things:
//
//   - A partition whose owner left goes, among the members with room, to
//     one that reported its standby caught up, then to one that holds a
//     standby of it at all: that member restores only the tail.
//   - A partition that must move from a live member to another (a member
//     joined, so every share shrank) moves only once the new owner has
//     caught up: until then the old owner keeps it, over its share, and the
//     new owner holds it as a warm-up standby. The new owner joins again
//     when its warm-ups have caught up (the member side, processor's
//     standby.go), and the next plan moves them. So a join pauses the
//     moved partitions for a rebalance and the tail, not for a restore of
//     the whole table (Kafka Streams' warm-up replicas, KIP-441).
//
// A standby is never placed on the owner's host (the members of one
// process share its state dir): it would hold nothing the owner does not.
type groupPlan struct {
	ids        []string
	subs       map[string]userData // by member ID: what each member reported
	partitions []int32
	replicas   int

	owned    map[string][]int32
	standbys map[string][]int32 // every partition a member keeps a copy of
	warmups  map[string][]int32 // the standbys a member will own once caught up
}

// distribute gives each member floor or ceil of len(partitions)/len(ids):
// first what it claims, up to its quota, then the other partitions in
// order, each to the best member with room (pick). With no claims at all
// (a new group) it is goka's range layout (ranges).
func (g *groupPlan) distribute() {
	g.owned = make(map[string][]int32, len(g.ids))
	g.warmups = map[string][]int32{}
	claimed := claims(g.ids, g.subs, g.partitions)
	if len(claimed) == 0 {
		g.owned = ranges(g.ids, g.partitions)
		return
	}
	quota := quotas(g.ids, len(g.partitions), claimed)
	taken := map[int32]bool{}
	// holder is the live member claiming a partition beyond its quota:
	// with standbys on, it keeps the partition until the new owner warmed up.
	holder := map[int32]string{}
	for _, id := range g.ids {
		n := min(len(claimed[id]), quota[id])
		g.owned[id] = slices.Clone(claimed[id][:n])
		for _, p := range claimed[id][:n] {
			taken[p] = true
		}
		for _, p := range claimed[id][n:] {
			holder[p] = id
		}
	}
	room := func(id string) bool { return len(g.owned[id])+len(g.warmups[id]) < quota[id] }
	for _, p := range g.partitions {
		if taken[p] {
			continue
		}
		to := g.pick(p, room)
		if h := holder[p]; h != "" && g.replicas > 0 && !slices.Contains(g.subs[to].caughtUp, p) && g.subs[to].host != g.subs[h].host {
			g.owned[h] = append(g.owned[h], p)
			g.warmups[to] = append(g.warmups[to], p)
			continue
		}
		g.owned[to] = append(g.owned[to], p)
	}
	for _, id := range g.ids {
		slices.Sort(g.owned[id])
	}
}

// pick is the member with room for partition p that reported p's standby
// caught up, else one holding a standby of p, else the first with room in
// ids order. The quotas add up to the partitions, so one always has room.
func (g *groupPlan) pick(p int32, room func(string) bool) string {
	best, rank := "", 3
	for _, id := range g.ids {
		if !room(id) {
			continue
		}
		r := 2
		switch d := g.subs[id]; {
		case slices.Contains(d.caughtUp, p):
			r = 0
		case slices.Contains(d.standbys, p):
			r = 1
		}
		if r < rank {
			best, rank = id, r
		}
	}
	return best
}

// placeStandbys gives each partition up to replicas standbys (a warm-up
// counts as one), each on a host other than the owner's and each other's:
// first members that hold a copy of its table already (a standby, or the
// partition they owned before), then the members with the fewest standbys.
// Fewer when there are not enough hosts.
func (g *groupPlan) placeStandbys() {
	g.standbys = map[string][]int32{}
	if g.replicas <= 0 {
		return
	}
	owner := map[int32]string{}
	for id, ps := range g.owned {
		for _, p := range ps {
			owner[p] = id
		}
	}
	warm := map[int32]string{}
	for id, ps := range g.warmups {
		for _, p := range ps {
			warm[p] = id
		}
	}
	// Each owner's standbys are spread evenly over the other hosts first:
	// when it leaves, each of them takes the partitions it holds standbys
	// of, and no one gets more than its share has room for (a partition
	// that goes where no standby is restores the whole table). Then a
	// member holding a copy keeps it, then the hosts and members with the
	// fewest standbys take them (each costs its process memory and disk).
	hostCount, memberCount := map[string]int{}, map[string]int{}
	pairCount := map[[2]string]int{} // (owner's host, standby's host)
	add := func(id string, p int32, hosts map[string]bool) {
		g.standbys[id] = append(g.standbys[id], p)
		h := g.subs[id].host
		hostCount[h]++
		memberCount[id]++
		pairCount[[2]string{g.subs[owner[p]].host, h}]++
		hosts[h] = true
	}
	for _, p := range g.partitions {
		ownerHost := g.subs[owner[p]].host
		hosts := map[string]bool{ownerHost: true}
		n := 0
		if w := warm[p]; w != "" {
			add(w, p, hosts)
			n++
		}
		for ; n < g.replicas; n++ {
			best := ""
			var bestRank [4]int
			for _, id := range g.ids {
				d := g.subs[id]
				if hosts[d.host] {
					continue
				}
				holds := 1
				if slices.Contains(d.standbys, p) || slices.Contains(d.partitions, p) {
					holds = 0
				}
				rank := [4]int{pairCount[[2]string{ownerHost, d.host}], holds, hostCount[d.host], memberCount[id]}
				if best == "" || less(rank, bestRank) {
					best, bestRank = id, rank
				}
			}
			if best == "" {
				break // no other host
			}
			add(best, p, hosts)
		}
	}
}

// less orders ranks lexicographically.
func less(a, b [4]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// inputs is each member's input partitions when they are planned apart
// from the tables (an input-first plan): a partition's owner consumes its
// inputs, except that a member warming a partition up consumes that
// partition's inputs at once, while the old owner keeps its table and loop
// partition until the warm-up caught up. The member warming up forwards
// what it would judge in that table through the loop topic's partition of
// the same number, so every event is still judged in its one table. This
// is what Kafka Streams does by keeping a topology's stateless tasks apart
// from its stateful ones: a new member takes load as soon as it joined,
// not once it copied its share of the tables.
func (g *groupPlan) inputs() map[string][]int32 {
	warming := map[int32]bool{}
	for _, ps := range g.warmups {
		for _, p := range ps {
			warming[p] = true
		}
	}
	in := make(map[string][]int32, len(g.ids))
	for _, id := range g.ids {
		for _, p := range g.owned[id] {
			if !warming[p] {
				in[id] = append(in[id], p)
			}
		}
		in[id] = append(in[id], g.warmups[id]...)
		slices.Sort(in[id])
	}
	return in
}
