package dedup_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/codecs"
)

// txnTable writes seen records to a table topic in Kafka transactions, as
// the exactly-once runtime does: each record to its key's FNV-1a partition,
// where the runtime re-keys to and goka's View looks.
type txnTable struct {
	t     *testing.T
	topic string
	p     sarama.SyncProducer
}

func newTxnTable(t *testing.T, brokers []string, topic string) *txnTable {
	c := sarama.NewConfig()
	c.Version = sarama.V2_8_0_0
	c.Producer.Idempotent = true
	c.Producer.Transaction.ID = "view-test-" + topic
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Return.Successes = true
	c.Producer.Partitioner = sarama.NewHashPartitioner
	c.Net.MaxOpenRequests = 1
	p, err := sarama.NewSyncProducer(brokers, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return &txnTable{t: t, topic: topic, p: p}
}

// write sends recs in one transaction and commits or aborts it.
func (w *txnTable) write(commit bool, recs map[string]*codecs.SeenRecord) {
	w.t.Helper()
	if err := w.p.BeginTxn(); err != nil {
		w.t.Fatal(err)
	}
	for _, k := range slices.Sorted(maps.Keys(recs)) {
		v, err := recs[k].MarshalBinary()
		if err != nil {
			w.t.Fatal(err)
		}
		if _, _, err := w.p.SendMessage(&sarama.ProducerMessage{Topic: w.topic, Key: sarama.StringEncoder(k), Value: sarama.ByteEncoder(v)}); err != nil {
			w.t.Fatal(err)
		}
	}
	end := w.p.CommitTxn
	if !commit {
		end = w.p.AbortTxn
	}
	if err := end(); err != nil {
		w.t.Fatal(err)
	}
}

// keysIn returns n seen records whose keys hash to partition p of parts.
func keysIn(prefix string, p, parts int32, n int) map[string]*codecs.SeenRecord {
	hash := sarama.NewHashPartitioner("")
	out := map[string]*codecs.SeenRecord{}
	for i := 0; len(out) < n; i++ {
		k := fmt.Sprintf("%s-%d", prefix, i)
		if got, _ := hash.Partition(&sarama.ProducerMessage{Key: sarama.StringEncoder(k)}, parts); got == p {
			out[k] = &codecs.SeenRecord{FirstProcessed: time.Unix(1700000000, int64(i)).UTC(), AggregateID: "agg-" + k,
				Topic: "orders", Partition: p, Offset: int64(i)}
		}
	}
	return out
}

// runView starts a goka View of topic with opts, in memory, until the test
// ends.
func runView(t *testing.T, brokers []string, topic string, opts ...goka.ViewOption) *goka.View {
	opts = append(opts, goka.WithViewStorageBuilder(storage.MemoryBuilder()),
		goka.WithViewLogger(log.New(io.Discard, "", 0)))
	view, err := goka.NewView(brokers, goka.Table(topic), codecs.Seen{}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- view.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("view: %v", err)
		}
	})
	return view
}

// waitRecovered waits up to d for view to report Recovered.
func waitRecovered(view *goka.View, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !view.Recovered() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond) // polling goka's state
	}
	return true
}

// viewKeys is every key the view holds.
func viewKeys(t *testing.T, view *goka.View) []string {
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

// A table whose every partition ends in a transaction marker, one with a
// tail of aborted records longer than the first look back, one with
// nothing committed: goka's View with ViewOptions recovers and holds
// exactly the committed records; without them it never recovers.
func TestViewOptionsRecoverTheCommittedTable(t *testing.T) {
	const parts = 3
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, "g-table"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close) // after the views stop
	brokers := cluster.ListenAddrs()
	w := newTxnTable(t, brokers, "g-table")

	committed := map[string]*codecs.SeenRecord{}
	commit := func(recs map[string]*codecs.SeenRecord) {
		w.write(true, recs)
		maps.Copy(committed, recs)
	}
	commit(keysIn("a", 0, parts, 20))
	commit(keysIn("b", 1, parts, 20))
	// An aborted overwrite of a committed key, and aborted records of
	// partition 2, which never gets a committed one.
	overwrite := map[string]*codecs.SeenRecord{}
	for k := range keysIn("a", 0, parts, 1) {
		overwrite[k] = &codecs.SeenRecord{AggregateID: "aborted"}
	}
	w.write(false, overwrite)
	w.write(false, keysIn("x", 2, parts, 30))
	commit(keysIn("c", 0, parts, 5))
	// Partition 1 ends with 1,500 aborted records: more than the tail the
	// view looks at first.
	w.write(false, keysIn("y", 1, parts, 1500))
	want := slices.Sorted(maps.Keys(committed))

	// goka's View alone, read_committed, waits for the marker at the
	// high-water mark minus one.
	rc := goka.DefaultConfig()
	rc.Consumer.IsolationLevel = sarama.ReadCommitted
	plain := runView(t, brokers, "g-table", goka.WithViewConsumerSaramaBuilder(goka.SaramaConsumerBuilderWithConfig(rc)))
	if waitRecovered(plain, 2*time.Second) {
		t.Fatal("goka's View without ViewOptions recovered: the table's tail is no transaction marker, the test shows nothing")
	}

	// The snippet of docs/library.md.
	ctx, cancel := context.WithCancel(context.Background())
	view, err := goka.NewView(brokers,
		goka.GroupTable("g"), codecs.Seen{},
		append(dedup.ViewOptions(nil),
			goka.WithViewStorageBuilder(storage.MemoryBuilder()))...)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- view.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("view: %v", err)
		}
	})
	select {
	case <-view.WaitRunning():
	case <-time.After(10 * time.Second):
		t.Fatal("the View with ViewOptions did not recover within 10 s")
	}
	// goka's state merger may call the view running when its first
	// partitions are; Recovered asks each.
	if !waitRecovered(view, 10*time.Second) {
		t.Fatal("the View with ViewOptions runs but is not recovered")
	}
	if got := viewKeys(t, view); !slices.Equal(got, want) {
		t.Fatalf("the view holds %d keys, want the %d committed ones:\n got %v\nwant %v", len(got), len(want), got, want)
	}
	for k, rec := range committed {
		v, err := view.Get(k)
		if err != nil {
			t.Fatalf("Get(%q): %v", k, err)
		}
		got, ok := v.(*codecs.SeenRecord)
		if !ok || *got != *rec {
			t.Fatalf("Get(%q) = %#v, want %#v", k, v, rec)
		}
	}
	for k := range keysIn("x", 2, parts, 30) {
		if v, err := view.Get(k); v != nil || err != nil {
			t.Fatalf("Get(%q) of an aborted record = %v, %v; want nil", k, v, err)
		}
	}

	// After recovery the view follows new commits, and only those.
	w.write(false, keysIn("z", 2, parts, 3))
	later := keysIn("d", 2, parts, 3)
	commit(later)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := viewKeys(t, view)
		if slices.Equal(got, slices.Sorted(maps.Keys(committed))) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the view did not catch up with a later commit: holds %d keys, want %d", len(got), len(committed))
		}
		time.Sleep(20 * time.Millisecond) // polling the view
	}
}
