package harness

import (
	"slices"
	"time"
)

// eventMeasure is what one failover event cost, read from the group's
// samples around it.
type eventMeasure struct {
	// Gap: from the event until every affected partition committed again
	// under its new (or restarted) owner.
	Gap time.Duration
	// Pause: the longest time an affected partition went without its
	// committed offset advancing while it had input waiting, from the event
	// until the gap was over. For a stopped owner it is about the gap; for
	// a partition that moves only once its new owner warmed up, it is the
	// hand-over alone: the old owner processed it meanwhile.
	Pause time.Duration
	// Stall: the longest time a partition whose owner did not change went
	// without its committed offset advancing while it had input waiting,
	// from the event until the group was stable again (and the gap over).
	Stall time.Duration
	// Handover (scale out, a contender that hands a new member everything
	// within the event): from the event until the new member held its
	// share of every topic's partitions and each of them committed again
	// under it. It differs from the gap when a contender hands a new
	// member the partitions that keep no state first (the worker's input
	// partitions while it warms their tables up, Kafka Streams' stateless
	// tasks) and the rest once warm. HandoverPause is the longest pause of
	// those partitions meanwhile. Zero when not measured.
	Handover, HandoverPause time.Duration
	// Affected and Unmoved count the partitions of either kind.
	Affected, Unmoved int
	// Settled: the group was Stable with the wanted members from then on.
	Settled time.Time
}

// measureEvent reads an event at time at from samples, whose first element
// is the group before the event (stable, with its owners) and the rest
// those taken since. victim is the identity of the member stopped at the
// event ("" for none), quiet the moment it had exited (its last commit is
// in every sample taken after), want the members the group settles with.
// It reports false until the group settled and every affected partition
// committed again.
//
// A partition is affected when the victim owned it or its owner changed.
// Its new owner counts from the handover: the first sample, at or after
// quiet, where the group is Stable and the partition has its final owner;
// the gap ends at the first sample after that whose committed offset is
// beyond the handover's. So an old owner's last commit on its way out (a
// SIGTERM, a revoke) never counts as the new owner's. Resolution: the
// sampling interval.
func measureEvent(samples []*groupSample, at, quiet time.Time, victim string, want []string) (eventMeasure, bool) {
	var m eventMeasure
	if len(samples) < 2 || len(samples[0].owner) == 0 {
		return m, false // no owners before the event: it fell into a rebalance
	}
	before := samples[0]
	parts := make([]tp, 0, len(before.owner))
	for p := range before.owner {
		parts = append(parts, p)
	}
	settled := -1
	for i := 1; i < len(samples); i++ {
		s := samples[i]
		if s.at.After(at) && !s.at.Before(quiet) && s.stable(want, parts) {
			settled = i
			break
		}
	}
	if settled < 0 {
		return m, false
	}
	final := samples[settled]
	m.Settled = final.at
	end := final.at
	var unmoved, affected []tp
	for _, p := range parts {
		if before.owner[p] != victim && final.owner[p] == before.owner[p] {
			unmoved = append(unmoved, p)
			continue
		}
		affected = append(affected, p)
		m.Affected++
		committed, ok := resumed(samples[1:], p, quiet, final.owner[p], want, parts)
		if !ok {
			return m, false
		}
		if committed.After(end) {
			end = committed
		}
		m.Gap = max(m.Gap, committed.Sub(at))
	}
	m.Unmoved = len(unmoved)
	for _, p := range unmoved {
		m.Stall = max(m.Stall, longestStall(samples, p, at, end))
	}
	for _, p := range affected {
		m.Pause = max(m.Pause, longestStall(samples, p, at, end))
	}
	return m, true
}

// measureHandover reads, from samples taken since a join at time at, when
// member newcomer held its share of every topic (the floor of the topic's
// partitions over the members want) in a Stable group and each of those
// partitions committed beyond its offset at that sample, and the longest
// pause of those partitions from the join until then. False until then.
func measureHandover(samples []*groupSample, at time.Time, newcomer string, want []string) (handover, pause time.Duration, ok bool) {
	if len(samples) < 2 {
		return 0, 0, false
	}
	var parts []tp
	for p := range samples[0].owner {
		parts = append(parts, p)
	}
	var held []tp
	for _, s := range samples[1:] {
		if s.at.Before(at) || !s.stable(want, parts) || !holdsShare(s, newcomer, len(want)) {
			continue
		}
		for _, p := range parts {
			if s.owner[p] == newcomer {
				held = append(held, p)
			}
		}
		break
	}
	if held == nil {
		return 0, 0, false
	}
	end := at
	for _, p := range held {
		committed, ok := resumed(samples[1:], p, at, newcomer, want, parts)
		if !ok {
			return 0, 0, false
		}
		if committed.After(end) {
			end = committed
		}
	}
	for _, p := range held {
		pause = max(pause, longestStall(samples, p, at, end))
	}
	return end.Sub(at), pause, true
}

// holdsShare reports whether member holds, in sample s, at least its share
// of every topic's partitions among members members: the floor of the
// topic's partitions over them.
func holdsShare(s *groupSample, member string, members int) bool {
	total, own := map[string]int{}, map[string]int{}
	for p, owner := range s.owner {
		total[p.topic]++
		if owner == member {
			own[p.topic]++
		}
	}
	for topic, n := range total {
		if own[topic] < n/members {
			return false
		}
	}
	return true
}

// everyShareHeld reports whether each of members holds its share of every
// topic in s (holdsShare).
func everyShareHeld(s *groupSample, members []string) bool {
	for _, m := range members {
		if !holdsShare(s, m, len(members)) {
			return false
		}
	}
	return true
}

// resumed is when partition p first committed beyond its offset at the
// handover to owner (see measureEvent).
func resumed(samples []*groupSample, p tp, quiet time.Time, owner string, want []string, parts []tp) (time.Time, bool) {
	base := int64(-1)
	for _, s := range samples {
		if base < 0 {
			if !s.at.Before(quiet) && s.stable(want, parts) && s.owner[p] == owner {
				base = s.committed[p]
			}
			continue
		}
		if s.committed[p] > base {
			return s.at, true
		}
	}
	return time.Time{}, false
}

// longestStall is the longest time in [from, to] that partition p's
// committed offset stood still while records waited beyond it (more than
// one offset: a transactional writer's commit marker takes one).
func longestStall(samples []*groupSample, p tp, from, to time.Time) time.Duration {
	var longest time.Duration
	last, prev := from, samples[0].committed[p]
	waiting := false
	for _, s := range samples[1:] {
		if s.at.Before(from) {
			prev = s.committed[p]
			continue
		}
		if s.at.After(to) {
			break
		}
		c := s.committed[p]
		waiting = s.end[p]-c > 1
		switch {
		case c > prev:
			longest = max(longest, s.at.Sub(last))
			last, prev = s.at, c
		case !waiting:
			last = s.at
		}
	}
	if waiting {
		longest = max(longest, to.Sub(last))
	}
	return longest
}

// quantiles are the median (the lower middle value for an even count) and
// the maximum of ds.
func quantiles(ds []time.Duration) (p50, top time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)/2], s[len(s)-1]
}
