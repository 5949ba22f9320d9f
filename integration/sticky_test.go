package integration

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/processor"
)

// assignments records the partitions a worker's member was given in each
// generation, from its "partitions assigned" log line, and passes warnings
// and errors on to stderr.
type assignments struct {
	slog.Handler // stderr, warnings and up
	input        string
	mu           *sync.Mutex
	byGen        map[int64][]int32
	latest       *int64
}

func newAssignments(input string) *assignments {
	return &assignments{Handler: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}),
		input: input, mu: &sync.Mutex{}, byGen: map[int64][]int32{}, latest: new(int64)}
}

func (a *assignments) Enabled(context.Context, slog.Level) bool { return true }

func (a *assignments) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "partitions assigned" {
		var gen int64
		var parts []int32
		r.Attrs(func(at slog.Attr) bool {
			switch at.Key {
			case "generation":
				gen = at.Value.Int64()
			case "claims":
				claims, _ := at.Value.Any().(map[string][]int32)
				parts = slices.Sorted(slices.Values(claims[a.input]))
			}
			return true
		})
		a.mu.Lock()
		a.byGen[gen], *a.latest = parts, gen
		a.mu.Unlock()
	}
	if !a.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return a.Handler.Handle(ctx, r)
}

func (a *assignments) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *a
	c.Handler = a.Handler.WithAttrs(attrs)
	return &c
}

func (a *assignments) WithGroup(name string) slog.Handler {
	c := *a
	c.Handler = a.Handler.WithGroup(name)
	return &c
}

// last is the generation of the member's latest assignment and its input
// partitions.
func (a *assignments) last() (int64, []int32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return *a.latest, a.byGen[*a.latest]
}

// settled returns the generation every worker was last assigned in, once
// they agree on one after after and their partitions cover the input's
// once each; false otherwise.
func settled(ws []*assignments, after int64, partitions int) (int64, bool) {
	var gen int64
	seen := map[int32]bool{}
	for i, w := range ws {
		g, parts := w.last()
		if g <= after || (i > 0 && g != gen) {
			return 0, false
		}
		gen = g
		for _, p := range parts {
			if seen[p] {
				return 0, false
			}
			seen[p] = true
		}
	}
	return gen, len(seen) == partitions
}

// TestStickyAssignmentWhenAMemberJoins: three instances share twelve
// partitions; a fourth joins. Each old instance keeps three of its four
// partitions, so the new one takes three, one from each, and no table moves
// between the old instances (goka's range strategy moved partitions between
// them, each a restore from the changelog). Every event comes out once.
func TestStickyAssignmentWhenAMemberJoins(t *testing.T) {
	const partitions = 12
	e := newEnv(t, partitions)
	group := e.group("eos-sticky")
	var logs []*assignments
	startOne := func() {
		a := newAssignments(e.input)
		topo := e.topology(group, &counter{})
		topo.Logger = slog.New(a)
		e.startEOS(topo, processor.Config{StateDir: t.TempDir()})
		logs = append(logs, a)
	}
	for range 3 {
		startOne()
	}
	var before int64
	until(t, 60*time.Second, "three members to share the input", func() bool {
		g, ok := settled(logs, 0, partitions)
		before = g
		return ok
	})
	old := make([][]int32, 3)
	for i, a := range logs {
		_, old[i] = a.last()
	}
	first := events("s1", 120)
	e.produce(first...)
	e.waitProcessed(group)

	startOne()
	second := events("s2", 120)
	e.produce(append(second, first[:40]...)...)
	var after int64
	until(t, 60*time.Second, "four members to share the input", func() bool {
		g, ok := settled(logs, before, partitions)
		after = g
		return ok
	})
	moved := 0
	for i := range 3 {
		_, now := logs[i].last()
		for _, p := range now {
			if !slices.Contains(old[i], p) {
				t.Errorf("partition %d moved to old member %d between generations %d and %d: it held %v, now %v",
					p, i, before, after, old[i], now)
			}
		}
		moved += len(old[i]) - len(now)
	}
	_, joined := logs[3].last()
	if len(joined) != partitions/4 || moved != partitions/4 {
		t.Errorf("the new member holds %v, the old ones gave up %d partitions; want 3 and 3", joined, moved)
	}
	t.Logf("generation %d: %v; generation %d: %v and the new member %v", before, old, after,
		func() (s string) {
			for i := range 3 {
				_, p := logs[i].last()
				s += fmt.Sprint(p)
			}
			return s
		}(), joined)

	third := events("s3", 120)
	e.produce(append(third, second[:40]...)...)
	e.waitProcessed(group)
	e.exactlyOnce(slices.Concat([]kafkatest.Record{}, first, second, third))
}
