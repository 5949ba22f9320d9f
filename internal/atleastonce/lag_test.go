package atleastonce

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/lovoo/goka"
)

// nopLag is a lag watch that reports nowhere, for runners whose fake
// processors never hold a partition.
func nopLag() *lagWatch {
	return newLagWatch(nil, func(string, int32, int64) {}, func(int32) {}, slog.New(slog.DiscardHandler))
}

// fakeOffsets answers the lag watch from maps keyed "topic/partition".
type fakeOffsets struct {
	hwm, start map[string]int64
	startErr   error
	startCalls int
	// onMark runs when a high-water mark is read: a revocation racing the
	// report.
	onMark func(topic string, partition int32)
}

func (f *fakeOffsets) highWaterMark(topic string, partition int32) (int64, error) {
	if f.onMark != nil {
		f.onMark(topic, partition)
	}
	hwm, ok := f.hwm[tp(topic, partition)]
	if !ok {
		return 0, errors.New("no leader")
	}
	return hwm, nil
}

func (f *fakeOffsets) startOffsets(partitions map[string][]int32) (map[string]map[int32]int64, error) {
	f.startCalls++
	if f.startErr != nil {
		return nil, f.startErr
	}
	starts := map[string]map[int32]int64{}
	for t, ps := range partitions {
		starts[t] = map[int32]int64{}
		for _, p := range ps {
			starts[t][p] = f.start[tp(t, p)]
		}
	}
	return starts, nil
}

func (f *fakeOffsets) close() error { return nil }

func tp(topic string, partition int32) string { return fmt.Sprintf("%s/%d", topic, partition) }

// recorder is what the lag watch reported and forgot.
type recorder struct {
	lag       map[string]int64
	forgotten []int32
}

func (r *recorder) watch() *lagWatch {
	r.lag = map[string]int64{}
	return newLagWatch([]string{"in", "g-loop"},
		func(topic string, p int32, n int64) { r.lag[tp(topic, p)] = n },
		func(p int32) {
			r.forgotten = append(r.forgotten, p)
			for k := range r.lag {
				if k == tp("in", p) || k == tp("g-loop", p) {
					delete(r.lag, k)
				}
			}
		},
		slog.New(slog.DiscardHandler))
}

func TestLagWatch(t *testing.T) {
	both := goka.Assignment{0: -1, 1: -1}
	offsets := func() *fakeOffsets {
		return &fakeOffsets{
			hwm:   map[string]int64{"in/0": 15, "in/1": 7, "g-loop/0": 3, "g-loop/1": 0},
			start: map[string]int64{"in/0": 10, "in/1": 7, "g-loop/0": 3, "g-loop/1": 0},
		}
	}
	for _, tc := range []struct {
		name          string
		run           func(t *testing.T, w *lagWatch, src *fakeOffsets)
		want          map[string]int64
		wantForgotten []int32
		wantStarts    int // startOffsets requests
	}{{
		name: "from the start offsets until a record is processed",
		run: func(t *testing.T, w *lagWatch, src *fakeOffsets) {
			w.assigned(both)
			tick(t, w, src)
		},
		want:       map[string]int64{"in/0": 5, "in/1": 0, "g-loop/0": 0, "g-loop/1": 0},
		wantStarts: 1,
	}, {
		name: "from the record after the last processed, start offsets read once",
		run: func(t *testing.T, w *lagWatch, src *fakeOffsets) {
			w.assigned(both)
			tick(t, w, src)
			w.processed("in", 0, 11)
			tick(t, w, src)
		},
		want:       map[string]int64{"in/0": 3, "in/1": 0, "g-loop/0": 0, "g-loop/1": 0},
		wantStarts: 1,
	}, {
		name: "a record processed before the start offset is known is not overwritten",
		run: func(t *testing.T, w *lagWatch, src *fakeOffsets) {
			w.assigned(both)
			w.processed("in", 0, 13)
			tick(t, w, src)
		},
		want:       map[string]int64{"in/0": 1, "in/1": 0, "g-loop/0": 0, "g-loop/1": 0},
		wantStarts: 1,
	}, {
		name: "a high-water mark read before more was processed counts 0, not less",
		run: func(t *testing.T, w *lagWatch, src *fakeOffsets) {
			w.assigned(both)
			src.onMark = func(topic string, p int32) {
				if topic == "in" && p == 0 {
					w.processed("in", 0, 19)
				}
			}
			tick(t, w, src)
		},
		want:       map[string]int64{"in/0": 0, "in/1": 0, "g-loop/0": 0, "g-loop/1": 0},
		wantStarts: 1,
	}, {
		name: "a closed table's partition is forgotten and not reported again",
		run: func(t *testing.T, w *lagWatch, src *fakeOffsets) {
			w.assigned(both)
			tick(t, w, src)
			w.closed(0)
			w.processed("in", 0, 14) // a straggler of the old session
			tick(t, w, src)
		},
		want:          map[string]int64{"in/1": 0, "g-loop/1": 0},
		wantForgotten: []int32{0},
		wantStarts:    1,
	}, {
		name: "a partition closed while its offsets are read is not brought back",
		run: func(t *testing.T, w *lagWatch, src *fakeOffsets) {
			w.assigned(both)
			src.onMark = func(topic string, p int32) {
				if topic == "in" && p == 1 {
					w.closed(1)
				}
			}
			tick(t, w, src)
		},
		want:          map[string]int64{"in/0": 5, "g-loop/0": 0},
		wantForgotten: []int32{1},
		wantStarts:    1,
	}, {
		name: "a new assignment forgets the partitions it lacks and reads the start offsets again",
		run: func(t *testing.T, w *lagWatch, src *fakeOffsets) {
			w.assigned(both)
			w.processed("in", 1, 6)
			tick(t, w, src)
			w.assigned(goka.Assignment{1: -1})
			src.hwm["in/1"] = 9
			src.start["in/1"] = 8
			tick(t, w, src)
		},
		want:          map[string]int64{"in/1": 1, "g-loop/1": 0},
		wantForgotten: []int32{0},
		wantStarts:    2,
	}, {
		name: "reset forgets every partition",
		run: func(t *testing.T, w *lagWatch, src *fakeOffsets) {
			w.assigned(both)
			tick(t, w, src)
			w.reset()
			if w.holdsAny() {
				t.Error("holds partitions after reset")
			}
		},
		want:          map[string]int64{},
		wantForgotten: []int32{0, 1},
		wantStarts:    1,
	}, {
		name: "without start offsets only processed partitions are reported",
		run: func(t *testing.T, w *lagWatch, src *fakeOffsets) {
			src.startErr = errors.New("coordinator not available")
			w.assigned(both)
			w.processed("in", 0, 9)
			if err := w.tick(src); err == nil {
				t.Error("tick: no error")
			}
		},
		want:       map[string]int64{"in/0": 5},
		wantStarts: 1,
	}, {
		name: "a partition whose high-water mark fails keeps its last value",
		run: func(t *testing.T, w *lagWatch, src *fakeOffsets) {
			w.assigned(both)
			tick(t, w, src)
			delete(src.hwm, "in/0")
			w.processed("in", 0, 12)
			if err := w.tick(src); err == nil {
				t.Error("tick: no error")
			}
		},
		want:       map[string]int64{"in/0": 5, "in/1": 0, "g-loop/0": 0, "g-loop/1": 0},
		wantStarts: 1,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var rec recorder
			w := rec.watch()
			src := offsets()
			tc.run(t, w, src)
			if !maps.Equal(rec.lag, tc.want) {
				t.Errorf("lag %v, want %v", rec.lag, tc.want)
			}
			slices.Sort(rec.forgotten)
			if !slices.Equal(rec.forgotten, tc.wantForgotten) {
				t.Errorf("forgot %v, want %v", rec.forgotten, tc.wantForgotten)
			}
			if src.startCalls != tc.wantStarts {
				t.Errorf("%d start offset requests, want %d", src.startCalls, tc.wantStarts)
			}
		})
	}
}

func tick(t *testing.T, w *lagWatch, src lagOffsets) {
	t.Helper()
	if err := w.tick(src); err != nil {
		t.Fatalf("tick: %v", err)
	}
}

// A client that could not be made is made again at the next tick; the
// failed attempt's value, even a nil pointer in the interface, is not used.
func TestLagWatchRetriesItsClient(t *testing.T) {
	reported := make(chan int64, 1)
	w := newLagWatch([]string{"in"}, func(_ string, _ int32, n int64) {
		select {
		case reported <- n:
		default:
		}
	}, func(int32) {}, slog.New(slog.DiscardHandler))
	w.interval = time.Millisecond
	w.assigned(goka.Assignment{0: -1})
	attempts := 0
	stop := w.start(func() (lagOffsets, error) {
		attempts++
		if attempts == 1 {
			var none *fakeOffsets
			return none, errors.New("no broker reachable")
		}
		return &fakeOffsets{hwm: map[string]int64{"in/0": 5}, start: map[string]int64{"in/0": 2}}, nil
	})
	n := <-reported
	stop()
	if n != 3 || attempts != 2 {
		t.Errorf("reported %d after %d attempts to connect; want 3 after 2", n, attempts)
	}
}
