package integration

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/faults"
	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/internal/tablefile"
	"github.com/dedupkit/dedup/processor"
)

// startEOS runs topo on the exactly-once runtime until the test ends or the
// returned worker is stopped; on the env's brokers unless cfg names others.
func (e *env) startEOS(topo *dedup.Topology, cfg processor.Config) *worker {
	e.t.Helper()
	return e.startEOSWithFault(topo, cfg, nil)
}

// startEOSWithFault is startEOS with beforeCommit run before every commit
// (internal/faults): an error stops the worker dead there.
func (e *env) startEOSWithFault(topo *dedup.Topology, cfg processor.Config, beforeCommit func() error) *worker {
	e.t.Helper()
	w := &worker{done: make(chan error, 1)}
	if cfg.Brokers == nil {
		cfg.Brokers = e.brokers
	}
	if cfg.Group.SessionTimeout == 0 {
		cfg.Group.SessionTimeout = 3 * time.Second
	}
	cfg.Logger = topo.Logger
	newCtx := e.t.Context()
	if beforeCommit != nil {
		newCtx = faults.WithBeforeCommit(newCtx, beforeCommit)
	}
	p, err := processor.New(newCtx, cfg, topo)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	w.ready, w.leave = p.Ready, p.LeaveGroupOnStop
	go func() { w.done <- p.Run(ctx) }()
	e.t.Cleanup(func() { w.stop(e.t) })
	return w
}

// events makes n distinct events over a few aggregates, each ID once.
func events(prefix string, n int) []kafkatest.Record {
	recs := make([]kafkatest.Record, n)
	for i := range recs {
		recs[i] = event(fmt.Sprintf("%s-%d", prefix, i), fmt.Sprintf("agg-%d", i%7))
	}
	return recs
}

// exactlyOnce fails unless every ID in want appears exactly once in the
// committed output and nothing else does.
func (e *env) exactlyOnce(want []kafkatest.Record) {
	e.t.Helper()
	ids := eventIDs(e.t, e.read(e.output))
	wantIDs := eventIDs(e.t, want)
	for id := range wantIDs {
		if ids[id] != 1 {
			e.t.Errorf("event %s in the output %d times, want 1", id, ids[id])
		}
	}
	for id := range ids {
		if _, ok := wantIDs[id]; !ok {
			e.t.Errorf("unexpected event %s in the output", id)
		}
	}
}

func TestExactlyOnceFaultBeforeCommit(t *testing.T) {
	e := newEnv(t, 3)
	group := e.group("eos-fault")
	state := t.TempDir()
	topo := e.topology(group, &counter{})
	in := events("f", 30)
	// Keyed by event ID: no loop, so the first transaction holds outputs and
	// changelog records.
	for i := range in {
		in[i].Key = fmt.Sprintf("f-%d", i)
	}
	e.produce(in...)

	var injected atomic.Bool
	w := e.startEOSWithFault(topo, processor.Config{StateDir: state}, func() error {
		injected.Store(true)
		return errors.New("power cut")
	})
	select {
	case err := <-w.done:
		w.cancel = nil
		if !injected.Load() || err == nil {
			t.Fatalf("worker ended with %v, want the injected crash", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("no transaction reached the injected fault")
	}

	// Nothing of the still open transaction is visible to read_committed
	// readers (its records are in the log: the HWM moved), and LevelDB holds
	// no seen record.
	if hwm := highWaterMarks(t, e.brokers, e.output); hwm == 0 {
		t.Fatal("the injected fault came before the outputs were produced; the test proves nothing")
	}
	out, err := kafkatest.ReadAll(context.Background(), e.brokers, e.output)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 0 {
		t.Fatalf("%d output records visible after a crash before commit", len(out))
	}

	for p := int32(0); p < 3; p++ {
		n := 0
		err := tablefile.Read(state, topo.TableTopic(), p, func(string, []byte) error { n++; return nil })
		if err != nil {
			t.Fatalf("read table partition %d: %v", p, err)
		}
		if n != 0 {
			t.Fatalf("table partition %d holds %d seen records of an uncommitted transaction", p, n)
		}
	}

	// Restart with the same state dir (same transactional ids: the open
	// transaction is aborted by fencing): every event comes out exactly once.
	e.startEOS(e.topology(group, &counter{}), processor.Config{StateDir: state})
	e.waitProcessed(group)
	e.exactlyOnce(in)
}

func TestExactlyOnceRebalanceRestoresFromChangelog(t *testing.T) {
	e := newEnv(t, 6)
	group := e.group("eos-rebalance")
	stateA, stateB := t.TempDir(), t.TempDir()
	obsA, hooksA := &counter{}, &tableHooks{}
	e.startEOS(e.topology(group, obsA), processor.Config{StateDir: stateA, Hooks: []processor.Hook{hooksA}})
	b := e.startEOS(e.topology(group, &counter{}), processor.Config{StateDir: stateB})

	first := events("r1", 60)
	e.produce(first...)
	e.waitProcessed(group)

	// B leaves: after its session times out A owns every partition and
	// restores B's tables from the changelog. Re-published events of the
	// first batch must be skipped by A.
	b.stop(t)
	second := events("r2", 40)
	e.produce(append(second, first...)...)
	e.waitProcessed(group)

	// B comes back: partitions move again, B restores what A wrote.
	obsB := &counter{}
	hooksB := &tableHooks{}
	e.startEOS(e.topology(group, obsB), processor.Config{StateDir: stateB, Hooks: []processor.Hook{hooksB}})
	until(t, 60*time.Second, "B to be assigned and restored", func() bool {
		hooksB.mu.Lock()
		defer hooksB.mu.Unlock()
		return len(hooksB.sizes) > 0
	})
	// Each partition's table is reported by one instance: A stopped
	// reporting the partitions it handed to B (PartitionRevoked).
	until(t, 60*time.Second, "A and B to report disjoint partitions, 6 in all", func() bool {
		a, b := hooksA.held(), hooksB.held()
		for p := range b {
			if a[p] {
				return false
			}
		}
		return len(a)+len(b) == 6
	})
	third := events("r3", 40)
	e.produce(append(third, append(second, first...)...)...)
	e.waitProcessed(group)

	all := append(append(append([]kafkatest.Record{}, first...), second...), third...)
	e.exactlyOnce(all)
	if _, skippedB := obsB.counts(); skippedB == 0 {
		t.Errorf("B skipped nothing after coming back; it should own partitions with re-published events")
	}
}

// TestExactlyOnceWithTwoThreads runs two members of two partitions each. An
// event keyed by aggregate whose ID hashes to a partition of the member that
// reads it is judged at once; the others go through the loop topic to the
// other member. Both paths are taken, and every event comes out once.
func TestExactlyOnceWithTwoThreads(t *testing.T) {
	e := newEnv(t, 4)
	group := e.group("eos-threads")
	obs := &counter{}
	topo := e.topology(group, obs)
	w := e.startEOS(topo, processor.Config{StateDir: t.TempDir(), Threads: 2})
	// Both members in one generation: a member alone would own every
	// partition and judge every event in place.
	until(t, 60*time.Second, "both members to be assigned", w.ready)
	e.produceWithCopies(group, obs, "t")
	if looped := obs.looped(); looped == 0 || looped == 250 {
		t.Fatalf("%d of 250 events looped; want some looped to the other member and some judged at once", looped)
	}
	if recs := highWaterMarks(t, e.brokers, topo.LoopTopic()); recs == 0 {
		t.Fatalf("nothing in %s; events owned by the other member must go through it", topo.LoopTopic())
	}
}

// TestExactlyOnceOneMemberJudgesReKeyedEventsInPlace: a member that owns
// every partition judges each event keyed by aggregate in its event ID's
// table partition without the loop topic, and a second instance, restoring
// those partitions from the changelog, skips every copy.
func TestExactlyOnceOneMemberJudgesReKeyedEventsInPlace(t *testing.T) {
	e := newEnv(t, 4)
	group := e.group("eos-inplace")
	obs := &counter{}
	topo := e.topology(group, obs)
	w := e.startEOS(topo, processor.Config{StateDir: t.TempDir()})
	in := e.produceWithCopies(group, obs, "ip")
	if looped := obs.looped(); looped != 0 {
		t.Fatalf("%d events looped; one member owns every partition", looped)
	}
	if recs := highWaterMarks(t, e.brokers, topo.LoopTopic()); recs != 0 {
		t.Fatalf("%d records in %s; one member owns every partition", recs, topo.LoopTopic())
	}

	// Two members now, on empty state dirs: each restores its partitions
	// and loops what the other owns; every copy was seen.
	w.stop(t)
	obs2 := &counter{}
	e.startEOS(e.topology(group, obs2), processor.Config{StateDir: t.TempDir(), Threads: 2})
	e.produce(in...)
	e.waitProcessed(group)
	e.exactlyOnce(in)
	if processed, skipped := obs2.counts(); processed != 0 || skipped != 200 {
		t.Fatalf("after restore: processed %d, skipped %d; want 0 and 200", processed, skipped)
	}
	if obs2.looped() == 0 {
		t.Fatal("no event looped with two members; the restore check did not cover the loop path")
	}
}

// produceWithCopies produces 200 events keyed by aggregate and a
// second copy of the first 50, waits until group has processed them and
// checks that each event came out once and obs counted 200 processed and
// 50 skipped. It returns the 200 events.
func (e *env) produceWithCopies(group string, obs *counter, prefix string) []kafkatest.Record {
	e.t.Helper()
	in := events(prefix, 200)
	e.produce(append(in, in[:50]...)...)
	e.waitProcessed(group)
	e.exactlyOnce(in)
	if processed, skipped := obs.counts(); processed != 200 || skipped != 50 {
		e.t.Fatalf("processed %d, skipped %d; want 200 and 50", processed, skipped)
	}
	return in
}

// highWaterMarks sums the high-water marks of topic: records in the log,
// committed or not.
func highWaterMarks(t *testing.T, brokers []string, topic string) int64 {
	t.Helper()
	client, err := sarama.NewClient(brokers, kafkatest.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, p := range parts {
		n, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatal(err)
		}
		sum += n
	}
	return sum
}

// TestExactlyOnceWithoutRekey runs --rekey=never: events keyed by aggregate
// are judged in their own partition under their event ID, nothing goes
// through the loop topic, and a fresh instance restores that table from the
// changelog and still skips every re-published copy.
func TestExactlyOnceWithoutRekey(t *testing.T) {
	e := newEnv(t, 4)
	group := e.group("eos-norekey")
	topo := e.topology(group, &counter{})
	topo.Rekey = dedup.RekeyNever
	w := e.startEOS(topo, processor.Config{StateDir: t.TempDir()})
	in := events("nr", 200) // keyed by aggregate: the key is never the event ID
	e.produce(append(in, in[:50]...)...)
	e.waitProcessed(group)
	e.exactlyOnce(in)
	if loop := highWaterMarks(t, e.brokers, topo.LoopTopic()); loop != 0 {
		t.Fatalf("%d records in %s; rekey=never must not loop", loop, topo.LoopTopic())
	}

	// A new instance with an empty state dir restores the table and skips
	// every copy of the first 200.
	w.stop(t)
	obs := &counter{}
	fresh := e.topology(group, obs)
	fresh.Rekey = dedup.RekeyNever
	e.startEOS(fresh, processor.Config{StateDir: t.TempDir()})
	e.produce(in...)
	e.waitProcessed(group)
	e.exactlyOnce(in)
	if processed, skipped := obs.counts(); processed != 0 || skipped != 200 {
		t.Fatalf("after restore: processed %d, skipped %d; want 0 and 200", processed, skipped)
	}
}

// TestRekeyNeverDeadLettersKeylessRecords: under rekey=never an event is
// judged in its record key's partition, so two keyless copies of one event,
// which land on any partition, could both pass. They are dead-lettered with
// a named reason instead, and keyed events go on.
func TestRekeyNeverDeadLettersKeylessRecords(t *testing.T) {
	e := newEnv(t, 4)
	group := e.group("eos-nokey")
	topo := e.topology(group, &counter{})
	topo.Rekey = dedup.RekeyNever
	e.startEOS(topo, processor.Config{StateDir: t.TempDir()})
	keyed := events("k", 20)
	var keyless []kafkatest.Record
	for i := range 5 {
		r := event(fmt.Sprintf("nokey-%d", i), "")
		keyless = append(keyless, r, r) // two copies each
	}
	e.produce(append(keyed, keyless...)...)
	e.waitProcessed(group)
	e.exactlyOnce(keyed)
	dlq := e.read(group + "-dlq")
	if len(dlq) != len(keyless) {
		t.Fatalf("%d dead letters, want the %d keyless records", len(dlq), len(keyless))
	}
	for _, r := range dlq {
		if got := string(r.Headers[dedup.HeaderDLQReason]); got != dedup.ReasonNoRecordKey {
			t.Fatalf("dead letter reason %q, want %s", got, dedup.ReasonNoRecordKey)
		}
	}
}
