package integration

import (
	"context"
	"io"
	"log"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/codecs"
	"github.com/dedupkit/dedup/internal/kafkatest"
)

// gokaView runs goka's View of group's table, in memory, until the test
// ends.
func gokaView(t *testing.T, brokers []string, group string, opts ...goka.ViewOption) *goka.View {
	t.Helper()
	opts = append(opts, goka.WithViewStorageBuilder(storage.MemoryBuilder()), goka.WithViewLogger(log.New(io.Discard, "", 0)))
	view, err := goka.NewView(brokers, goka.GroupTable(goka.Group(group)), codecs.Seen{}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- view.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("goka view: %v", err)
		}
	})
	return view
}

// recoveredWithin waits up to d for view to report Recovered and says how
// long it took.
func recoveredWithin(view *goka.View, d time.Duration) (time.Duration, bool) {
	start := time.Now()
	for !view.Recovered() {
		if time.Since(start) > d {
			return d, false
		}
		time.Sleep(20 * time.Millisecond) // polling goka's state
	}
	return time.Since(start), true
}

// gokaViewKeys is every key view holds, sorted.
func gokaViewKeys(t *testing.T, view *goka.View) []string {
	t.Helper()
	it, err := view.Iterator()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Release()
	var keys []string
	for it.Next() {
		keys = append(keys, it.Key())
	}
	slices.Sort(keys)
	return keys
}

// uncommitted is the keys of got that are not in the sorted want.
func uncommitted(got, want []string) []string {
	return slices.DeleteFunc(slices.Clone(got), func(k string) bool { _, found := slices.BinarySearch(want, k); return found })
}

// A goka View of a group whose worker was SIGKILLed mid-run, with a
// transaction open: with dedup.ViewOptions it recovers within 30 s, holding
// only committed records, and once the dead transaction is aborted it holds
// exactly the IDs whose outputs were committed, each as the seen record of
// the input record that carried it. goka's View alone, beside it, either
// never recovers or keeps the aborted records.
func TestGokaViewReadsTheTableOfAKilledWorker(t *testing.T) {
	e := newEnv(t, 3)
	bin := buildProcessor(t)
	group := e.group("gokaview")
	done := e.streamInBackground("v", 3000, 100*time.Millisecond)
	p := startProc(t, bin, workerArgs(e, group, t.TempDir(), "--session-timeout", "3s")...)
	p.waitMetric("dedup_events_processed_total", 60*time.Second, func(v float64) bool { return v >= 300 })
	p.kill()
	killed := time.Now()

	plain := gokaView(t, e.brokers, group)
	view := gokaView(t, e.brokers, group, dedup.ViewOptions(nil)...)
	_, ok := recoveredWithin(view, 30*time.Second)
	if !ok {
		t.Fatal("goka's View with dedup.ViewOptions did not recover within 30 s of the kill")
	}
	t.Logf("the view recovered %v after the kill", time.Since(killed).Round(time.Millisecond))
	early := gokaViewKeys(t, view)

	s := <-done
	if s.err != nil {
		t.Fatal(s.err)
	}
	// The committed outputs are final once the dead transaction is aborted.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, topic := range []string{group + "-table", e.output} {
		if err := kafkatest.WaitSettled(ctx, e.brokers, topic); err != nil {
			t.Fatal(err)
		}
	}
	want := slices.Sorted(maps.Keys(eventIDs(t, e.read(e.output))))
	if len(want) < 100 || len(want) >= len(s.recs) {
		t.Fatalf("%d of %d events committed at the kill: not mid-run", len(want), len(s.recs))
	}
	if bad := uncommitted(early, want); len(bad) > 0 {
		t.Fatalf("at its recovery the view held %d keys that were never committed, e.g. %q", len(bad), bad[0])
	}

	// The running view follows the abort; a new one recovers from it.
	deadline := time.Now().Add(30 * time.Second)
	for got := gokaViewKeys(t, view); !slices.Equal(got, want); got = gokaViewKeys(t, view) {
		if time.Now().After(deadline) {
			t.Fatalf("the running view holds %d keys, want the %d committed ones", len(got), len(want))
		}
		time.Sleep(100 * time.Millisecond) // polling the view
	}
	fresh := gokaView(t, e.brokers, group, dedup.ViewOptions(nil)...)
	if _, ok := recoveredWithin(fresh, 30*time.Second); !ok {
		t.Fatal("a new view did not recover within 30 s")
	}
	if got := gokaViewKeys(t, fresh); !slices.Equal(got, want) {
		t.Fatalf("a new view holds %d keys, want the %d committed ones", len(got), len(want))
	}

	// goka's View alone waits for a marker where the killed transaction's
	// abort ended a partition, and where the kill left that transaction's
	// records last it recovered on them and kept them after the abort.
	if plain.Recovered() {
		got := gokaViewKeys(t, plain)
		if slices.Equal(got, want) {
			t.Fatal("goka's View without ViewOptions holds the committed IDs too: the test shows nothing")
		}
		t.Logf("goka's View alone recovered with %d keys, %d of them never committed", len(got), len(uncommitted(got, want)))
	} else {
		t.Log("goka's View alone did not recover")
	}

	// Each ID's record names the input record that carried it.
	inputs := map[[2]int64]kafkatest.Record{}
	for _, r := range e.read(e.input) {
		inputs[[2]int64{int64(r.Partition), r.Offset}] = r
	}
	for _, id := range want {
		v, err := fresh.Get(id)
		if err != nil {
			t.Fatalf("Get(%q): %v", id, err)
		}
		rec, ok := v.(*codecs.SeenRecord)
		if !ok {
			t.Fatalf("Get(%q) = %#v, want a *codecs.SeenRecord", id, v)
		}
		in, found := inputs[[2]int64{int64(rec.Partition), rec.Offset}]
		if rec.Topic != e.input || !found || eventIDs(t, []kafkatest.Record{in})[id] != 1 || rec.AggregateID != in.Key || rec.FirstProcessed.IsZero() {
			t.Fatalf("Get(%q) = %+v: not the record of an input record carrying it", id, rec)
		}
	}
}
