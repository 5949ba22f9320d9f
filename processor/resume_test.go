package processor

import (
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// hwmClaim is a claim with a fixed high-water mark.
type hwmClaim struct {
	sarama.ConsumerGroupClaim // only the methods below are called
	topic                     string
	partition                 int32
	hwm                       int64
}

func (c *hwmClaim) Topic() string              { return c.topic }
func (c *hwmClaim) Partition() int32           { return c.partition }
func (c *hwmClaim) HighWaterMarkOffset() int64 { return c.hwm }

func TestResumeWatch(t *testing.T) {
	claims := map[string][]int32{"in": {0, 1}, "loop": {0, 1}}
	ready := time.Unix(1000, 0)
	// start registers the four claims with these high-water marks and
	// next offsets: in/0 has records waiting, the others nothing but the
	// loop's commit marker.
	start := func(w *resumeWatch) {
		for _, c := range []struct {
			topic     string
			p         int32
			hwm, next int64
		}{{"in", 0, 500, 100}, {"in", 1, 80, 80}, {"loop", 0, 41, 40}, {"loop", 1, 7, 7}} {
			pr := &claimProgress{}
			pr.next.Store(c.next)
			w.started(&hwmClaim{topic: c.topic, partition: c.p, hwm: c.hwm}, pr)
		}
	}
	for _, tc := range []struct {
		name  string
		setup func(w *resumeWatch)
		at    time.Time
		want  bool
	}{
		{"not restored yet", func(w *resumeWatch) { start(w) }, ready.Add(time.Hour), false},
		{"a claim not started", func(w *resumeWatch) {
			w.restored(ready)
			w.started(&hwmClaim{topic: "in", partition: 1, hwm: 5}, &claimProgress{})
		}, ready, false},
		{"records waiting on one partition", func(w *resumeWatch) { start(w); w.restored(ready) }, ready, false},
		{"the waiting partition committed", func(w *resumeWatch) {
			start(w)
			w.restored(ready)
			w.committed(map[string]map[int32]int64{"in": {0: 101}})
		}, ready, true},
		{"every partition committed before its claim started", func(w *resumeWatch) {
			w.restored(ready)
			w.committed(map[string]map[int32]int64{"in": {0: 1, 1: 1}, "loop": {0: 1, 1: 1}})
		}, ready, true},
		{"held long enough", func(w *resumeWatch) { start(w); w.restored(ready) }, ready.Add(resumeHoldMax), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w resumeWatch
			w.reset(claims)
			tc.setup(&w)
			if got := w.resumed(tc.at); got != tc.want {
				t.Fatalf("resumed = %v, want %v", got, tc.want)
			}
		})
	}
}

// A new session forgets the last one's progress.
func TestResumeWatchResetsPerSession(t *testing.T) {
	var w resumeWatch
	w.reset(map[string][]int32{"in": {0}})
	w.restored(time.Unix(1000, 0))
	w.committed(map[string]map[int32]int64{"in": {0: 1}})
	if !w.resumed(time.Unix(1000, 0)) {
		t.Fatal("not resumed after its only partition committed")
	}
	w.reset(map[string][]int32{"in": {0}})
	if w.resumed(time.Unix(2000, 0)) {
		t.Fatal("a new session is resumed before its restores ended")
	}
}
