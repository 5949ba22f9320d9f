package integration

import (
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/atleastonce"
	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/internal/metrics"
)

func TestSameEventTwiceGivesOneOutput(t *testing.T) {
	e := newEnv(t, 3)
	obs := &counter{}
	group := e.group("g")
	e.start(e.topology(group, obs), t.TempDir())
	e.produce(event("e1", "order-1"), event("e1", "order-1"), event("e2", "order-2"))
	e.waitProcessed(group)

	ids := eventIDs(t, e.read(e.output))
	if len(ids) != 2 || ids["e1"] != 1 || ids["e2"] != 1 {
		t.Fatalf("outputs by event ID: %v, want e1 and e2 once each", ids)
	}
	if processed, skipped := obs.counts(); processed != 2 || skipped != 1 {
		t.Fatalf("processed %d, duplicates %d; want 2 and 1", processed, skipped)
	}
}

func TestSameEventUnderTwoGroupsIsProcessedByEach(t *testing.T) {
	e := newEnv(t, 3)
	settlement, notification := &counter{}, &counter{}
	g1, g2 := e.group("settlement"), e.group("notification")
	e.start(e.topology(g1, settlement), t.TempDir())
	e.start(e.topology(g2, notification), t.TempDir())
	e.produce(event("e1", "order-1"), event("e1", "order-1"))
	e.waitProcessed(g1)
	e.waitProcessed(g2)

	if ids := eventIDs(t, e.read(e.output)); ids["e1"] != 2 {
		t.Fatalf("e1 in the output %d times, want once per group (2)", ids["e1"])
	}
	for name, c := range map[string]*counter{g1: settlement, g2: notification} {
		if processed, skipped := c.counts(); processed != 1 || skipped != 1 {
			t.Errorf("group %s: processed %d, skipped %d; want 1 and 1", name, processed, skipped)
		}
	}
}

func TestRepublishedEventIsSkipped(t *testing.T) {
	e := newEnv(t, 3)
	obs := &counter{}
	group := e.group("g")
	e.start(e.topology(group, obs), t.TempDir())
	first := e.produce(event("e1", "order-1"), event("e2", "order-2"))
	e.waitProcessed(group)
	// The same event IDs again, later, at new offsets.
	again := e.produce(event("e1", "order-1"), event("e2", "order-2"))
	if again[0].Offset == first[0].Offset && again[0].Partition == first[0].Partition {
		t.Fatal("re-published record did not get a new offset")
	}
	e.waitProcessed(group)

	if ids := eventIDs(t, e.read(e.output)); len(ids) != 2 || ids["e1"] != 1 || ids["e2"] != 1 {
		t.Fatalf("outputs %v, want e1 and e2 once each", ids)
	}
	if _, skipped := obs.counts(); skipped != 2 {
		t.Fatalf("skipped %d, want 2", skipped)
	}
}

func TestTableRebuiltFromChangelogAfterStateDirLoss(t *testing.T) {
	e := newEnv(t, 3)
	group := e.group("g")
	state := t.TempDir()
	w := e.start(e.topology(group, &counter{}), state)
	e.produce(event("e1", "a"), event("e2", "b"), event("e3", "c"), event("e4", "d"))
	e.waitProcessed(group)
	w.stop(t)
	// goka closed every partition's table: none is reported as held.
	if n := w.partitionsHeld(); n != 0 {
		t.Fatalf("%d partitions still reported after the worker stopped", n)
	}

	if err := os.RemoveAll(state); err != nil {
		t.Fatal(err)
	}
	obs := &counter{}
	w = e.start(e.topology(group, obs), state)
	e.produce(event("e1", "a"), event("e3", "c"), event("e5", "e"))
	e.waitProcessed(group)

	if ids := eventIDs(t, e.read(e.output)); len(ids) != 5 {
		t.Fatalf("outputs %v, want e1..e5 once each", ids)
	} else {
		for id, n := range ids {
			if n != 1 {
				t.Errorf("%s in the output %d times", id, n)
			}
		}
	}
	if processed, skipped := obs.counts(); processed != 1 || skipped != 2 {
		t.Fatalf("after rebuild: processed %d, skipped %d; want 1 (e5) and 2 (e1, e3)", processed, skipped)
	}
	if n := w.tableSize(); n != 5 {
		t.Fatalf("rebuilt table holds %d records, want 5", n)
	}
}

func TestBadInputIsDeadLettered(t *testing.T) {
	e := newEnv(t, 1)
	obs := &counter{}
	group := e.group("g")
	topo := e.topology(group, obs)
	e.start(topo, t.TempDir())
	bad := []struct {
		rec    kafkatest.Record
		reason string
	}{
		{kafkatest.Record{Key: "k", Value: []byte("not json at all")}, "not-json"},
		{kafkatest.Record{Key: "k", Value: []byte(`{"aggregateId":"a","type":"X"}`)}, "no-id"},
		{kafkatest.Record{Key: "k", Value: []byte(`{"eventId":"d1","aggregateId":"a","eventId":"d2"}`)}, "duplicate-field"},
		{kafkatest.Record{Key: "k", Value: []byte{}}, "empty-value"},
		{kafkatest.Record{Key: "k", Value: nil}, "null-value"},
	}
	recs := []kafkatest.Record{event("good-1", "a")}
	for _, b := range bad {
		recs = append(recs, b.rec)
	}
	recs = append(recs, event("good-2", "b"))
	e.produce(recs...)
	e.waitProcessed(group)

	if ids := eventIDs(t, e.read(e.output)); len(ids) != 2 || ids["good-1"] != 1 || ids["good-2"] != 1 {
		t.Fatalf("good events around the bad ones: outputs %v", ids)
	}
	dlq := e.read(topo.DLQ)
	if len(dlq) != len(bad) {
		t.Fatalf("dead-letter topic has %d records, want %d", len(dlq), len(bad))
	}
	for i, b := range bad {
		got := dlq[i]
		if r := string(got.Headers[dedup.HeaderDLQReason]); r != b.reason {
			t.Errorf("dead letter %d: reason %q, want %q", i, r, b.reason)
		}
		if len(got.Headers[dedup.HeaderDLQError]) == 0 || string(got.Headers[dedup.HeaderDLQTopic]) != e.input {
			t.Errorf("dead letter %d lacks its error or source headers: %v", i, got.Headers)
		}
		if string(got.Value) != string(b.rec.Value) {
			t.Errorf("dead letter %d: value %q, want the input %q", i, got.Value, b.rec.Value)
		}
	}
}

// The best-effort runtime exports dedup_consumer_lag_records as the
// exactly-once one does (TestConsumerLagMetricMoves), wired as the worker
// wires it: a series for each input and loop partition it holds, above 0
// while a burst waits for a handler taking 20 ms an event, 0 once all is
// processed, and none left once the worker stopped.
func TestBestEffortConsumerLagMetricMoves(t *testing.T) {
	e := newEnv(t, 2)
	group := e.group("belag")
	topo := e.slowTopology(group)
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, group)
	w := e.startBestEffort(topo, atleastonce.Config{StateDir: t.TempDir(),
		TableSize: m.OnTableSize, TableClosed: m.ForgetPartition, ConsumerLag: m.OnConsumerLag})
	lag, waitLag := lagOf(t, reg, e.input)
	_, waitLoopLag := lagOf(t, reg, group+"-loop")
	waitLag("both partitions assigned, lag 0", 60*time.Second, func(sum float64, series int) bool { return series == 2 && sum == 0 })
	waitLoopLag("both loop partitions reported", 10*time.Second, func(_ float64, series int) bool { return series == 2 })

	want := e.produce(events("burst", 400)...)
	first := waitLag("the burst to show", 10*time.Second, func(sum float64, _ int) bool { return sum > 0 })
	peak := first
	waitLag("everything processed, lag 0", 60*time.Second, func(sum float64, _ int) bool {
		peak = max(peak, sum)
		return sum == 0
	})
	var loopPeak float64
	waitLoopLag("the loop processed, lag 0", 60*time.Second, func(sum float64, _ int) bool {
		loopPeak = max(loopPeak, sum)
		return sum == 0
	})
	t.Logf("input lag: first above 0 at %v, at most %v; loop lag at most %v (seen after the input's was 0)", first, peak, loopPeak)
	e.waitProcessed(group)
	ids := eventIDs(t, e.read(e.output))
	for id := range eventIDs(t, want) {
		if ids[id] == 0 {
			t.Errorf("event %s not in the output", id)
		}
	}

	w.stop(t)
	if sum, series := lag(); series != 0 {
		t.Errorf("%d lag series (sum %v) left after the worker stopped", series, sum)
	}
	if loop := consumerLag(t, reg)[group+"-loop"]; len(loop) != 0 {
		t.Errorf("loop lag series left after the worker stopped: %v", loop)
	}
}

// The worker binary wires the best-effort lag to /metrics: a series at 0
// for each input and loop partition once the input is processed.
func TestBestEffortWorkerExportsConsumerLag(t *testing.T) {
	e := newEnv(t, 2)
	group := e.group("belag-bin")
	p := startProc(t, buildProcessor(t), workerArgs(e, group, t.TempDir(), "--guarantee", "best-effort", "--commit-interval", "50ms")...)
	e.produce(events("belag", 20)...)
	p.waitMetric("dedup_events_processed_total", 60*time.Second, func(v float64) bool { return v >= 20 })
	series := regexp.MustCompile(`(?m)^dedup_consumer_lag_records\{[^}]*topic="([^"]+)"[^}]*\} (\S+)$`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		zero := map[string]int{} // series at 0 by topic
		for _, m := range series.FindAllStringSubmatch(get(t, p.base+"/metrics"), -1) {
			if m[2] == "0" {
				zero[m[1]]++
			}
		}
		if zero[e.input] == 2 && zero[group+"-loop"] == 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("lag series at 0 by topic: %v; want 2 of %s and 2 of %s-loop", zero, e.input, group)
		}
		time.Sleep(100 * time.Millisecond) // polling a condition on another process
	}
}
