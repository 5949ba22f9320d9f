package harness

import (
	"math"
	"testing"
)

// Each exactly-once row is set against the Kafka Streams row that routes
// events the same way, and every figure is worker / Kafka Streams.
func TestKStreamsComparisons(t *testing.T) {
	run := func(name string, secs, cpu float64, rss int64, warmRecs, warmSecs, warmCPU float64) RunResult {
		return RunResult{Contender: name, Run: 1, Records: 1000, Seconds: secs, Throughput: 1000 / secs, CPU: cpu, PeakRSS: rss,
			WarmRecords: warmRecs, WarmSeconds: warmSecs, WarmThroughput: warmRecs / warmSecs, WarmCPU: warmCPU}
	}
	rep := &Report{Config: Config{Contenders: []string{"exactly-once-100ms", "exactly-once-100ms-norekey", "kstreams", "kstreams-repartition"}},
		Runs: []RunResult{
			run("exactly-once-100ms", 1, 0.5, 100, 800, 0.5, 0.2),
			run("exactly-once-100ms-norekey", 0.5, 0.25, 100, 800, 0.25, 0.1),
			run("kstreams", 2, 2, 400, 800, 1, 0.8),
			run("kstreams-repartition", 4, 4, 400, 800, 2, 1.6),
		}}
	want := map[string]struct {
		peer                         string
		tput, warmTput, cpu, warmCPU float64
	}{
		"exactly-once-100ms":         {"kstreams-repartition", 4, 4, 0.125, 0.125},
		"exactly-once-100ms-norekey": {"kstreams", 4, 4, 0.125, 0.125},
	}
	got := rep.KStreamsComparisons()
	if len(got) != len(want) {
		t.Fatalf("%d comparisons, want %d", len(got), len(want))
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for _, c := range got {
		w, ok := want[c.Worker.Contender.Name]
		if !ok {
			t.Fatalf("unexpected row %s", c.Worker.Contender.Name)
		}
		if c.Peer.Contender.Name != w.peer {
			t.Errorf("%s set against %s, want %s", c.Worker.Contender.Name, c.Peer.Contender.Name, w.peer)
		}
		if !near(c.Throughput, w.tput) || !near(c.WarmThroughput, w.warmTput) || !near(c.CPUPerM, w.cpu) ||
			!near(c.WarmCPUPerM, w.warmCPU) || !near(c.PeakRSS, 0.25) || c.P99 != 0 {
			t.Errorf("%s: %+v", c.Worker.Contender.Name, c)
		}
	}
}
