package processor

import (
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// step is one event in a member's life at a time on a fake clock (seconds).
type step func(h *memberHealth, t0 time.Time)

func at(s float64, t0 time.Time) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// consume notes a batch of records of input partition p taken at second s.
func consume(s float64, p int32) step {
	return func(h *memberHealth, t0 time.Time) {
		msg := &sarama.ConsumerMessage{Topic: "in", Partition: p}
		h.consumed(at(s, t0), []inbound{{msg: msg}, {msg: msg}})
	}
}

// commit notes a transaction sealed at second sealed, holding done's
// partitions, committed at second s while the open one holds open's.
func commit(s, sealed float64, done, open []int32) step {
	offsets := func(ps []int32) map[string]map[int32]int64 {
		m := map[string]map[int32]int64{}
		for _, p := range ps {
			if m["in"] == nil {
				m["in"] = map[int32]int64{}
			}
			m["in"][p] = 1
		}
		return m
	}
	return func(h *memberHealth, t0 time.Time) {
		h.committed(at(s, t0), at(sealed, t0), offsets(done), offsets(open))
	}
}

func abort() step { return func(h *memberHealth, _ time.Time) { h.aborted() } }

func aborts(n int) step {
	return func(h *memberHealth, _ time.Time) {
		for range n {
			h.aborted()
		}
	}
}

// rejoin is a new session claiming ps at second s whose restore takes
// restore seconds; restore < 0: it is still restoring.
func rejoin(s, restore float64, ps ...int32) step {
	return func(h *memberHealth, t0 time.Time) {
		h.restoring(at(s, t0), map[string][]int32{"in": ps, "loop": ps})
		if restore >= 0 {
			h.restored(at(s+restore, t0))
		}
	}
}

func TestHealth(t *testing.T) {
	lim := healthLimits{abortLimit: 5, readyStall: 30 * time.Second, liveStall: 5 * time.Minute}
	tests := []struct {
		name        string
		restored    bool
		steps       []step
		now         float64 // seconds
		ready, live bool
		reason      string // in Reasons when not ready or not live
		aborts      int
		uncommitted time.Duration
	}{
		{name: "fresh", restored: true, now: 3600, ready: true, live: true},
		{name: "restoring", restored: false, now: 10, ready: false, live: true, reason: "tables restored"},
		{name: "committing", restored: true, now: 100, ready: true, live: true,
			steps: []step{consume(0, 0), commit(0.2, 0.1, []int32{0}, nil), consume(50, 0), commit(99, 98, []int32{0}, nil)}},
		{name: "idle for an hour after a commit", restored: true, now: 3600, ready: true, live: true,
			steps: []step{consume(0, 0), commit(1, 0.5, []int32{0}, nil)}},
		{name: "pending under the ready bound", restored: true, now: 29, ready: true, live: true,
			steps: []step{consume(0, 0)}, uncommitted: 29 * time.Second},
		{name: "pending past the ready bound", restored: true, now: 31, ready: false, live: true,
			steps: []step{consume(0, 0)}, reason: "consumed 31s ago are not committed (not ready from 30s)", uncommitted: 31 * time.Second},
		{name: "pending past the live bound", restored: true, now: 301, ready: false, live: false,
			steps: []step{consume(0, 0)}, reason: "(not live from 5m0s)", uncommitted: 301 * time.Second},
		{name: "a commit that leaves later records pending", restored: true, now: 40, ready: false, live: true,
			steps:  []step{consume(0, 0), consume(9.5, 1), commit(10, 9, []int32{0, 1}, []int32{1})},
			reason: "consumed 31s ago", uncommitted: 31 * time.Second},
		{name: "other partitions committing do not clear a stuck one", restored: true, now: 60, ready: false, live: true,
			steps: []step{consume(0, 0), consume(1, 1), commit(50, 49, []int32{1}, nil)}, reason: "not committed", uncommitted: time.Minute},
		{name: "four aborts", restored: true, now: 5, ready: true, live: true,
			steps: []step{consume(0, 0), aborts(4), consume(4, 0)}, aborts: 4, uncommitted: 5 * time.Second},
		{name: "five aborts", restored: true, now: 5, ready: false, live: true,
			steps: []step{consume(0, 0), aborts(5), consume(4, 0)}, reason: "5 transactions aborted in a row (not ready from 5)",
			aborts: 5, uncommitted: 5 * time.Second},
		{name: "a commit after aborts", restored: true, now: 10, ready: true, live: true,
			steps: []step{consume(0, 0), aborts(7), commit(9, 8, []int32{0}, nil)}},
		{name: "an abort keeps the records' clock through the rejoin", restored: true, now: 301, ready: false, live: false,
			steps:  []step{consume(0, 0), abort(), rejoin(1, 0.5, 0, 1), consume(2, 0), abort(), rejoin(3, 0.5, 0, 1), consume(200, 0)},
			reason: "not live", aborts: 2, uncommitted: 300 * time.Second},
		{name: "a restore stops the records' clock", restored: true, now: 420, ready: true, live: true,
			steps: []step{consume(0, 0), abort(), rejoin(10, 400, 0)}, aborts: 1, uncommitted: 20 * time.Second},
		{name: "while restoring", restored: false, now: 420, ready: false, live: true,
			steps: []step{consume(0, 0), abort(), rejoin(10, -1, 0)}, reason: "tables restored", aborts: 1, uncommitted: 10 * time.Second},
		{name: "a failed restore and another", restored: true, now: 100, ready: false, live: true,
			steps: []step{consume(0, 0), abort(), rejoin(10, 5, 0), rejoin(16, 4, 0)}, reason: "consumed 1m31s ago", aborts: 1,
			uncommitted: 91 * time.Second},
		{name: "aborted work that moved to another member", restored: true, now: 400, ready: true, live: true,
			steps: []step{consume(0, 0), aborts(6), rejoin(1, 1, 1, 2)}},
		{name: "aborted work partly kept", restored: true, now: 40, ready: false, live: true,
			steps: []step{consume(0, 0), consume(0, 1), aborts(6), rejoin(1, 0, 1)}, reason: "6 transactions aborted", aborts: 6,
			uncommitted: 40 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			var h memberHealth
			for _, s := range tt.steps {
				s(&h, t0)
			}
			got := judge(at(tt.now, t0), lim, []memberState{{restored: tt.restored, healthSnapshot: h.snapshot(at(tt.now, t0))}})
			if got.Ready != tt.ready || got.Live != tt.live {
				t.Fatalf("ready %v live %v, want %v %v (reasons %q)", got.Ready, got.Live, tt.ready, tt.live, got.Reasons)
			}
			reasons := strings.Join(got.Reasons, "; ")
			if (got.Ready && got.Live) != (reasons == "") {
				t.Errorf("reasons %q with ready %v live %v", reasons, got.Ready, got.Live)
			}
			if !strings.Contains(reasons, tt.reason) {
				t.Errorf("reasons %q lack %q", reasons, tt.reason)
			}
			if got.ConsecutiveAborts != tt.aborts || got.Uncommitted != tt.uncommitted {
				t.Errorf("aborts %d uncommitted %v, want %d %v", got.ConsecutiveAborts, got.Uncommitted, tt.aborts, tt.uncommitted)
			}
		})
	}
}

// The worker is as healthy as its sickest member, and its last commit is the
// latest of any.
// The member's loop may commit before it noted a batch (tests handle
// records directly): a zero memberHealth takes every call.
func TestHealthZeroValue(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var h memberHealth
	commit(1, 0, []int32{0}, []int32{0})(&h, t0)
	if s := h.snapshot(at(2, t0)); !s.oldest.Equal(t0) || !s.lastCommit.Equal(at(1, t0)) {
		t.Fatalf("%+v", s)
	}
}

func TestHealthOfSeveralMembers(t *testing.T) {
	lim := healthLimits{abortLimit: 5, readyStall: 30 * time.Second, liveStall: 5 * time.Minute}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var fine, stuck memberHealth
	consume(0, 0)(&fine, t0)
	commit(100, 99, []int32{0}, nil)(&fine, t0)
	consume(0, 1)(&stuck, t0)
	aborts(3)(&stuck, t0)
	got := judge(at(100, t0), lim, []memberState{
		{restored: true, healthSnapshot: fine.snapshot(at(100, t0))}, {restored: true, healthSnapshot: stuck.snapshot(at(100, t0))}})
	if got.Ready || !got.Live || got.ConsecutiveAborts != 3 || got.Uncommitted != 100*time.Second || !got.LastCommit.Equal(at(100, t0)) {
		t.Fatalf("%+v", got)
	}
}

func TestHealthBoundsAreValidated(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"ready bound within the transaction timeout", func(c *Config) { c.Health.ReadyStallAfter = 10 * time.Second }, "ready stall bound 10s: must exceed"},
		{"ready bound within the commit interval", func(c *Config) {
			c.Transactions.CommitInterval, c.Health.ReadyStallAfter = time.Minute, 40*time.Second
		}, "ready stall bound 40s: must exceed the commit interval and the transaction timeout (1m0s)"},
		{"live bound within the ready bound", func(c *Config) { c.Health.LiveStallAfter = 30 * time.Second }, "live stall bound 30s: must exceed the ready stall bound 30s"},
		{"negative abort limit", func(c *Config) { c.Health.ReadyAbortLimit = -1 }, "ready abort limit -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{Brokers: []string{"b:1"}, StateDir: "d"}
			tt.edit(&c)
			c.setDefaults()
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want %q", err, tt.want)
			}
		})
	}
	c := Config{Brokers: []string{"b:1"}, StateDir: "d"}
	c.setDefaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if c.Health.ReadyAbortLimit != 5 || c.Health.ReadyStallAfter != 30*time.Second || c.Health.LiveStallAfter != 5*time.Minute {
		t.Fatalf("defaults %d %v %v", c.Health.ReadyAbortLimit, c.Health.ReadyStallAfter, c.Health.LiveStallAfter)
	}
}
