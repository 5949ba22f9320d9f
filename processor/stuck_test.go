package processor

import (
	"slices"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// TestStuckTracker follows the open transactions the watch sees poll by
// poll and checks which it fences: only another instance's member of the
// group whose transaction it watched stay open, unchanged, for the bound,
// and none again within the refence window.
func TestStuckTracker(t *testing.T) {
	open := func(id string, pid int64, epoch int16, start int64) sarama.TransactionState {
		return sarama.TransactionState{TransactionalID: id, TransactionState: sarama.TransactionStateOngoing,
			ProducerID: pid, ProducerEpoch: epoch, TransactionStartTime: start}
	}
	other := open("g-b-0", 7, 1, 1000)
	type poll struct {
		at     time.Duration // since the first poll
		open   []sarama.TransactionState
		fence  []string
		spared []string
		floors map[string]time.Duration // ages on the coordinators' clocks
		next   time.Duration            // when not 0: how soon the next is due
	}
	cases := []struct {
		name  string
		polls []poll
	}{
		{"open for the bound is fenced", []poll{
			{at: 0, open: []sarama.TransactionState{other}},
			{at: 1900 * time.Millisecond, open: []sarama.TransactionState{other}},
			{at: 2 * time.Second, open: []sarama.TransactionState{other}, fence: []string{"g-b-0"}},
		}},
		{"a live member's transactions each end in time", []poll{
			{at: 0, open: []sarama.TransactionState{open("g-b-0", 7, 1, 1000)}},
			{at: time.Second, open: []sarama.TransactionState{open("g-b-0", 7, 1, 2000)}},
			{at: 2 * time.Second, open: []sarama.TransactionState{open("g-b-0", 7, 1, 3000)}},
			{at: 3 * time.Second, open: []sarama.TransactionState{open("g-b-0", 7, 2, 3000)}}, // a new epoch: a restart
			{at: 4 * time.Second, open: []sarama.TransactionState{open("g-b-0", 8, 0, 3000)}},
		}},
		{"a transaction that ended between polls starts over", []poll{
			{at: 0, open: []sarama.TransactionState{other}},
			{at: time.Second},
			{at: 2 * time.Second, open: []sarama.TransactionState{other}},
			{at: 3 * time.Second, open: []sarama.TransactionState{other}},
			{at: 4 * time.Second, open: []sarama.TransactionState{other}, fence: []string{"g-b-0"}},
		}},
		{"this instance's own, other groups' and other shapes are never fenced", []poll{
			{at: 0, open: []sarama.TransactionState{open("g-a-0", 1, 0, 1), open("h-b-0", 2, 0, 1), open("g-redrive", 3, 0, 1)}},
			{at: time.Minute, open: []sarama.TransactionState{open("g-a-0", 1, 0, 1), open("h-b-0", 2, 0, 1), open("g-redrive", 3, 0, 1)}},
		}},
		{"an instance whose ID this one's prefixes (a-1) is another instance", []poll{
			{at: 0, open: []sarama.TransactionState{open("g-a-1-0", 4, 0, 1)}},
			{at: 2 * time.Second, open: []sarama.TransactionState{open("g-a-1-0", 4, 0, 1)}, fence: []string{"g-a-1-0"}},
		}},
		{"a transaction that is not ongoing is not fenced", []poll{
			{at: 0, open: []sarama.TransactionState{{TransactionalID: "g-b-0", TransactionState: sarama.TransactionStatePrepareCommit, ProducerID: 7}}},
			{at: time.Minute, open: []sarama.TransactionState{{TransactionalID: "g-b-0", TransactionState: sarama.TransactionStatePrepareCommit, ProducerID: 7}}},
		}},
		{"stuck again soon after its fencing: spared, and warned about once", []poll{
			{at: 0, open: []sarama.TransactionState{other}},
			{at: 2 * time.Second, open: []sarama.TransactionState{other}, fence: []string{"g-b-0"}},
			{at: 3 * time.Second, open: []sarama.TransactionState{open("g-b-0", 7, 2, 5000)}},
			{at: 5 * time.Second, open: []sarama.TransactionState{open("g-b-0", 7, 2, 5000)}, spared: []string{"g-b-0"}},
			{at: 6 * time.Second, open: []sarama.TransactionState{open("g-b-0", 7, 2, 5000)}},
			{at: 9 * time.Second, open: []sarama.TransactionState{open("g-b-0", 7, 2, 5000)}},
		}},
		{"stuck again after the refence window: fenced again", []poll{
			{at: 0, open: []sarama.TransactionState{other}},
			{at: 2 * time.Second, open: []sarama.TransactionState{other}, fence: []string{"g-b-0"}},
			{at: 6 * time.Minute, open: []sarama.TransactionState{open("g-b-0", 7, 2, 9000)}},
			{at: 6*time.Minute + 2*time.Second, open: []sarama.TransactionState{open("g-b-0", 7, 2, 9000)}, fence: []string{"g-b-0"}},
		}},
		{"old enough on its coordinator's clock: fenced at first sight", []poll{
			{at: 0, open: []sarama.TransactionState{other}, floors: map[string]time.Duration{"g-b-0": 2 * time.Second}, fence: []string{"g-b-0"}},
		}},
		{"younger on its coordinator's clock: due once either clock says so", []poll{
			{at: 0, open: []sarama.TransactionState{other}, floors: map[string]time.Duration{"g-b-0": 1500 * time.Millisecond}, next: 500 * time.Millisecond},
			{at: 400 * time.Millisecond, open: []sarama.TransactionState{other}, floors: map[string]time.Duration{"g-b-0": 1900 * time.Millisecond}, next: 100 * time.Millisecond},
			{at: 500 * time.Millisecond, open: []sarama.TransactionState{other}, floors: map[string]time.Duration{"g-b-0": 2 * time.Second}, fence: []string{"g-b-0"}},
		}},
		{"young on its coordinator's clock: due after the bound from first sight", []poll{
			{at: 0, open: []sarama.TransactionState{other}, floors: map[string]time.Duration{"g-b-0": 0}, next: 2 * time.Second},
			{at: 1900 * time.Millisecond, open: []sarama.TransactionState{other}, floors: map[string]time.Duration{"g-b-0": 0}, next: 100 * time.Millisecond},
			{at: 2 * time.Second, open: []sarama.TransactionState{other}, floors: map[string]time.Duration{"g-b-0": 0}, fence: []string{"g-b-0"}},
		}},
		{"old on its coordinator's clock soon after its fencing: spared once", []poll{
			{at: 0, open: []sarama.TransactionState{other}, floors: map[string]time.Duration{"g-b-0": 3 * time.Second}, fence: []string{"g-b-0"}},
			{at: time.Second, open: []sarama.TransactionState{open("g-b-0", 7, 2, 5000)}, floors: map[string]time.Duration{"g-b-0": 3 * time.Second}, spared: []string{"g-b-0"}},
			{at: 2 * time.Second, open: []sarama.TransactionState{open("g-b-0", 7, 2, 5000)}, floors: map[string]time.Duration{"g-b-0": 4 * time.Second}},
		}},
		{"each instance on its own", []poll{
			{at: 0, open: []sarama.TransactionState{other}},
			{at: time.Second, open: []sarama.TransactionState{other, open("g-c-1", 9, 0, 1)}},
			{at: 2 * time.Second, open: []sarama.TransactionState{other, open("g-c-1", 9, 0, 1)}, fence: []string{"g-b-0"}},
			{at: 3 * time.Second, open: []sarama.TransactionState{open("g-c-1", 9, 0, 1)}, fence: []string{"g-c-1"}},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := &stuckTracker{group: "g", own: "g-a", after: 2 * time.Second, refence: 5 * time.Minute}
			start := time.Unix(1_000_000, 0)
			for i, p := range c.polls {
				states := map[string]sarama.TransactionState{}
				for _, s := range p.open {
					states[s.TransactionalID] = s
				}
				fence, spared, next := tr.due(start.Add(p.at), states, p.floors)
				slices.Sort(fence)
				slices.Sort(spared)
				if !slices.Equal(fence, p.fence) || !slices.Equal(spared, p.spared) {
					t.Fatalf("poll %d at %v: fence %v, spared %v; want %v, %v", i, p.at, fence, spared, p.fence, p.spared)
				}
				if p.next != 0 && next != p.next {
					t.Fatalf("poll %d at %v: next due in %v, want %v", i, p.at, next, p.next)
				}
			}
		})
	}
}

// TestStuckBound checks the bound's default and that an explicit one is
// kept.
func TestStuckBound(t *testing.T) {
	cases := []struct {
		name                       string
		commitInterval, configured time.Duration
		want                       time.Duration
	}{
		{"defaults", 100 * time.Millisecond, 0, 2 * time.Second},
		{"a long commit interval doubles the floor", 5 * time.Second, 0, 10 * time.Second},
		{"configured", 100 * time.Millisecond, 900 * time.Millisecond, 900 * time.Millisecond},
	}
	for _, c := range cases {
		if got := stuckBound(c.commitInterval, c.configured); got != c.want {
			t.Errorf("%s: stuckBound = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestStuckAgeFloors checks the ages on the coordinators' clocks: each
// ongoing transaction against the newest ongoing one of its own
// coordinator, never another's.
func TestStuckAgeFloors(t *testing.T) {
	st := func(state string, start int64) sarama.TransactionState {
		return sarama.TransactionState{TransactionState: state, TransactionStartTime: start}
	}
	states := map[string]sarama.TransactionState{
		"g-b-0": st(sarama.TransactionStateOngoing, 10_000),        // coordinator 1, 2.5 s before its newest
		"g-a-0": st(sarama.TransactionStateOngoing, 12_500),        // coordinator 1's newest
		"g-c-0": st(sarama.TransactionStateOngoing, 1_000),         // coordinator 2, alone there
		"g-d-0": st(sarama.TransactionStateOngoing, 50_000),        // coordinator unknown
		"g-e-0": st(sarama.TransactionStatePrepareCommit, 900_000), // not ongoing: tells no clock
	}
	coordinators := map[string]int32{"g-b-0": 1, "g-a-0": 1, "g-c-0": 2, "g-e-0": 1}
	got := ageFloors(states, func(id string) (int32, bool) {
		c, ok := coordinators[id]
		return c, ok
	})
	want := map[string]time.Duration{"g-b-0": 2500 * time.Millisecond, "g-a-0": 0, "g-c-0": 0}
	if len(got) != len(want) {
		t.Fatalf("floors %v, want %v", got, want)
	}
	for id, d := range want {
		if got[id] != d {
			t.Fatalf("floors %v, want %v", got, want)
		}
	}
}
