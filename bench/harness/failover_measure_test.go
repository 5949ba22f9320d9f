package harness

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func sec(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// timeline builds samples of a group of partitions p0..p3 of topic "in".
type timeline struct{ samples []*groupSample }

// at adds a sample: state, owner per partition ("" unassigned), committed
// per partition; every partition's log end is 1000 (records waiting)
// unless ends says otherwise.
func (tl *timeline) at(s float64, state string, members []string, owners [4]string, committed [4]int64, ends ...int64) *timeline {
	g := &groupSample{at: sec(s), state: state, members: members, owner: map[tp]string{}, committed: map[tp]int64{}, end: map[tp]int64{}}
	for i := range owners {
		p := tp{"in", int32(i)}
		if owners[i] != "" {
			g.owner[p] = owners[i]
		}
		g.committed[p] = committed[i]
		g.end[p] = 1000
		if len(ends) == 4 {
			g.end[p] = ends[i]
		}
	}
	tl.samples = append(tl.samples, g)
	return tl
}

func TestMeasureEvent(t *testing.T) {
	abc, bc, abcd := []string{"a", "b", "c"}, []string{"b", "c"}, []string{"a", "b", "c", "d"}
	rest := [4]string{"a", "a", "b", "c"}
	handed := [4]string{"a", "d", "b", "c"}
	none := [4]string{}
	tests := []struct {
		name    string
		tl      *timeline
		quiet   float64
		victim  string
		want    []string
		ok      bool
		gap     time.Duration
		stall   time.Duration
		pause   time.Duration
		settled float64
	}{
		{
			name: "kill, not restarted: a's partitions move to b and c after the session timeout",
			tl: new(timeline).
				at(-0.1, "Stable", abc, rest, [4]int64{100, 100, 100, 100}).
				at(2.5, "Stable", abc, rest, [4]int64{100, 100, 125, 125}).
				at(5, "Stable", abc, rest, [4]int64{100, 100, 150, 150}).
				at(7.5, "Stable", abc, rest, [4]int64{100, 100, 175, 175}).
				at(10, "PreparingRebalance", abc, none, [4]int64{100, 100, 200, 200}).
				at(12, "Stable", bc, [4]string{"b", "c", "b", "c"}, [4]int64{100, 100, 200, 200}).
				at(13, "Stable", bc, [4]string{"b", "c", "b", "c"}, [4]int64{130, 100, 200, 200}).
				at(14, "Stable", bc, [4]string{"b", "c", "b", "c"}, [4]int64{160, 110, 200, 200}).
				at(16, "Stable", bc, [4]string{"b", "c", "b", "c"}, [4]int64{190, 140, 250, 250}),
			victim: "a", want: bc, ok: true, gap: 14 * time.Second, settled: 12, pause: 14 * time.Second,
			// b and c held p2 and p3 throughout; they stood still from 10 s
			// until the gap was over at 14 s (the window's end).
			stall: 4 * time.Second,
		},
		{
			name: "not settled: the moved partition has not committed under its new owner",
			tl: new(timeline).
				at(-0.1, "Stable", abc, rest, [4]int64{100, 100, 100, 100}).
				at(12, "Stable", bc, [4]string{"b", "c", "b", "c"}, [4]int64{100, 100, 200, 200}).
				at(13, "Stable", bc, [4]string{"b", "c", "b", "c"}, [4]int64{130, 100, 250, 250}),
			victim: "a", want: bc, ok: false,
		},
		{
			name: "SIGTERM and restart: the victim's own last commit on its way out does not end the gap",
			tl: new(timeline).
				at(-0.1, "Stable", abc, rest, [4]int64{100, 100, 100, 100}).
				at(0.3, "Stable", abc, rest, [4]int64{100, 100, 105, 105}).
				// a committed on its way out at 0.55 s and had exited at 0.6 s.
				at(0.7, "Stable", abc, rest, [4]int64{120, 120, 110, 110}).
				at(1, "Stable", abc, rest, [4]int64{120, 120, 120, 120}).
				at(3, "Stable", abc, rest, [4]int64{140, 120, 140, 140}).
				at(4, "Stable", abc, rest, [4]int64{160, 125, 160, 160}),
			quiet: 0.6, victim: "a", want: abc, ok: true, gap: 4 * time.Second, settled: 0.7,
			pause: 3300 * time.Millisecond, // p1 from 0.7 s to 4 s
			stall: 2 * time.Second,         // p2 and p3 from 1 s to 3 s
		},
		{
			name: "a partition with nothing waiting does not stall",
			tl: new(timeline).
				at(-0.1, "Stable", abc, rest, [4]int64{100, 100, 100, 100}, 1000, 1000, 100, 1000).
				at(5, "Stable", abc, rest, [4]int64{100, 100, 100, 100}, 1000, 1000, 100, 1000).
				at(6, "Stable", abc, rest, [4]int64{100, 100, 100, 150}, 1000, 1000, 101, 1000).
				at(8, "Stable", bc, [4]string{"b", "c", "b", "c"}, [4]int64{100, 100, 100, 200}, 1000, 1000, 101, 1000).
				at(9, "Stable", bc, [4]string{"b", "c", "b", "c"}, [4]int64{150, 150, 100, 250}, 1000, 1000, 101, 1000),
			victim: "a", want: bc, ok: true, gap: 9 * time.Second, settled: 8, pause: 9 * time.Second,
			// p2 never had more than a commit marker waiting; p3 stood still 0-6 s.
			stall: 6 * time.Second,
		},
		{
			name: "scale out with a warm-up: the group is not settled while the new member owns nothing",
			tl: new(timeline).
				at(-0.1, "Stable", abc, rest, [4]int64{100, 100, 100, 100}).
				at(1, "Stable", abcd, rest, [4]int64{110, 110, 110, 110}).
				at(3, "Stable", abcd, rest, [4]int64{130, 130, 130, 130}).
				at(5, "Stable", abcd, rest, [4]int64{150, 150, 150, 150}).
				at(7, "Stable", abcd, rest, [4]int64{170, 170, 170, 170}).
				at(8, "Stable", abcd, handed, [4]int64{180, 170, 180, 180}).
				at(9.5, "Stable", abcd, handed, [4]int64{195, 200, 195, 195}),
			victim: "", want: abcd, ok: true, gap: 9500 * time.Millisecond, settled: 8,
			// a processed p1 until 7 s; d committed it first at 9.5 s.
			pause: 2500 * time.Millisecond,
			stall: 2 * time.Second, // the largest step between samples of the unmoved
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, ok := measureEvent(tt.tl.samples, sec(0), sec(tt.quiet), tt.victim, tt.want)
			if ok != tt.ok {
				t.Fatalf("settled = %v, want %v (%+v)", ok, tt.ok, m)
			}
			if !ok {
				return
			}
			if m.Gap != tt.gap || m.Stall != tt.stall || m.Pause != tt.pause || !m.Settled.Equal(sec(tt.settled)) {
				t.Errorf("gap %v stall %v pause %v settled %v, want %v %v %v %v", m.Gap, m.Stall, m.Pause, m.Settled.Sub(t0),
					tt.gap, tt.stall, tt.pause, sec(tt.settled).Sub(t0))
			}
		})
	}
}

func TestQuantiles(t *testing.T) {
	tests := []struct {
		in       []time.Duration
		p50, max time.Duration
	}{
		{nil, 0, 0},
		{[]time.Duration{3, 1, 2}, 2, 3},
		{[]time.Duration{4, 1, 3, 2}, 2, 4},
	}
	for _, tt := range tests {
		if p50, top := quantiles(tt.in); p50 != tt.p50 || top != tt.max {
			t.Errorf("quantiles(%v) = %v, %v; want %v, %v", tt.in, p50, top, tt.p50, tt.max)
		}
	}
}

// A new member takes an input partition at once and its table's loop
// partition once warm: the handover ends when it holds its share of both
// topics and the loop partition committed again under it.
func TestMeasureHandover(t *testing.T) {
	abc, abcd := []string{"a", "b", "c"}, []string{"a", "b", "c", "d"}
	type step struct {
		at       float64
		state    string
		members  []string
		in, loop [4]string
		loopOf1  int64 // loop partition 1's committed offset; the others advance with time
	}
	build := func(steps []step) []*groupSample {
		var out []*groupSample
		for _, st := range steps {
			g := &groupSample{at: sec(st.at), state: st.state, members: st.members, owner: map[tp]string{}, committed: map[tp]int64{}, end: map[tp]int64{}}
			for i := range 4 {
				for topic, owners := range map[string][4]string{"in": st.in, "loop": st.loop} {
					p := tp{topic, int32(i)}
					if owners[i] != "" {
						g.owner[p] = owners[i]
					}
					g.committed[p] = 100 + int64(st.at*10)
					g.end[p] = 1000
				}
			}
			g.committed[tp{"loop", 1}] = st.loopOf1
			out = append(out, g)
		}
		return out
	}
	rest, warming, whole := [4]string{"a", "a", "b", "c"}, [4]string{"a", "d", "b", "c"}, [4]string{"a", "d", "b", "c"}
	steps := []step{
		{-0.1, "Stable", abc, rest, rest, 100},
		{1, "Stable", abcd, warming, rest, 110},
		{2, "Stable", abcd, warming, rest, 120},
		{3, "Stable", abcd, warming, rest, 130},
		{4, "PreparingRebalance", abcd, [4]string{}, [4]string{}, 130},
		{4.5, "Stable", abcd, warming, whole, 130},
		{5, "Stable", abcd, warming, whole, 130},
		{6, "Stable", abcd, warming, whole, 140},
	}
	handover, pause, ok := measureHandover(build(steps), sec(0.5), "d", abcd)
	if !ok || handover != 5500*time.Millisecond || pause != 3*time.Second {
		t.Fatalf("handover %v, pause %v, %v; want 5.5s, 3s (loop 1 still from 3 to 6), true", handover, pause, ok)
	}
	if _, _, ok := measureHandover(build(steps[:7]), sec(0.5), "d", abcd); ok {
		t.Fatal("handover reported before loop partition 1 committed under d")
	}
	if _, _, ok := measureHandover(build(steps[:4]), sec(0.5), "d", abcd); ok {
		t.Fatal("handover reported while d held no loop partition")
	}
}

// An event whose first sample shows no owners fell into a rebalance: it
// never settles, rather than measuring nothing as a gap of zero.
func TestMeasureEventNeedsOwnersBefore(t *testing.T) {
	abc := []string{"a", "b", "c"}
	tl := new(timeline).
		at(-0.1, "PreparingRebalance", abc, [4]string{}, [4]int64{100, 100, 100, 100}).
		at(1, "Stable", abc, [4]string{"a", "b", "c", "c"}, [4]int64{110, 110, 110, 110}).
		at(2, "Stable", abc, [4]string{"a", "b", "c", "c"}, [4]int64{120, 120, 120, 120})
	if m, ok := measureEvent(tl.samples, sec(0), sec(0), "a", abc); ok {
		t.Fatalf("measured %+v from an event in a rebalance", m)
	}
}

// A member holds its share when it has the floor of every topic's
// partitions over the members, not when it has enough of one topic.
func TestEveryShareHeld(t *testing.T) {
	s := &groupSample{owner: map[tp]string{
		{"in", 0}: "a", {"in", 1}: "b", {"in", 2}: "b", {"in", 3}: "c",
		{"loop", 0}: "a", {"loop", 1}: "a", {"loop", 2}: "b", {"loop", 3}: "c",
	}}
	if !everyShareHeld(s, []string{"a", "b", "c"}) {
		t.Error("each of a, b, c holds at least one partition of each topic, want true")
	}
	s.owner[tp{"loop", 3}] = "b"
	if everyShareHeld(s, []string{"a", "b", "c"}) {
		t.Error("c holds no loop partition, want false")
	}
}
