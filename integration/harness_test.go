// Package integration runs the worker against a real Kafka broker. The
// brokers come from KAFKA_BROKERS (comma-separated); `make test` starts a
// local Apache Kafka with integration/kafka/kafka.sh and sets it, and a user
// can point the tests at a cluster of their own. Without KAFKA_BROKERS the
// tests are skipped, so `go test ./...` alone runs the unit tier.
package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/atleastonce"
	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/internal/wire"
	"github.com/dedupkit/dedup/processor"
)

func brokers(t *testing.T) []string {
	t.Helper()
	return kafkatest.Brokers(t)
}

// unique returns a name no earlier run used, so tests never share topics or
// groups and can run against a long-lived cluster.
func unique(name string) string {
	b := make([]byte, 4)
	rand.Read(b)
	return name + "-" + hex.EncodeToString(b)
}

// counter is a dedup.Hook that tests read.
type counter struct {
	mu                         sync.Mutex
	processed, skipped, rekeys int
	tooOld                     int
	dead                       map[string]int
}

func (c *counter) OnProcessed(int32, time.Duration) { c.mu.Lock(); c.processed++; c.mu.Unlock() }
func (c *counter) OnSkipped(int32)                  { c.mu.Lock(); c.skipped++; c.mu.Unlock() }
func (c *counter) OnRekeyed()                       { c.mu.Lock(); c.rekeys++; c.mu.Unlock() }
func (c *counter) OnTooOld(int32)                   { c.mu.Lock(); c.tooOld++; c.mu.Unlock() }
func (c *counter) OnDeadLettered(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead == nil {
		c.dead = map[string]int{}
	}
	c.dead[reason]++
}

// looped is how many events were sent through the loop topic.
func (c *counter) looped() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rekeys
}

func (c *counter) counts() (processed, skipped int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.processed, c.skipped
}

// env is one test's topics on the shared broker.
type env struct {
	t       *testing.T
	brokers []string
	input   string
	output  string
}

func newEnv(t *testing.T, partitions int32) *env {
	e := &env{t: t, brokers: brokers(t), input: unique("in"), output: unique("out")}
	dropTopics(t, e.brokers, e.input, e.output)
	if err := kafkatest.CreateTopic(e.brokers, e.input, partitions); err != nil {
		t.Fatal(err)
	}
	return e
}

// group names a new consumer group whose topics (table, loop and the
// default dead-letter topic) are deleted when the test ends.
func (e *env) group(prefix string) string {
	g := unique(prefix)
	dropTopics(e.t, e.brokers, g+"-table", g+"-loop", g+"-dlq")
	return g
}

// dropTopics deletes topics when the test ends, after the workers it
// started stopped (cleanups run last registered first), so runs against a
// long-lived broker do not pile up topics: a `make test` used to leave
// hundreds of partitions behind, and a local broker with a few thousand
// took more than kafka.sh's 90 s to start. A failed test keeps its topics
// for inspection.
func dropTopics(t *testing.T, brokers []string, topics ...string) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("keeping topics %v for inspection", topics)
			return
		}
		if err := kafkatest.DeleteTopics(brokers, topics...); err != nil {
			t.Logf("deleting the test's topics: %v", err)
		}
	})
}

func (e *env) topology(group string, obs dedup.Hook) *dedup.Topology {
	return &dedup.Topology{
		Group: group, Inputs: []string{e.input}, Outputs: []string{e.output}, DLQ: group + "-dlq",
		KeyType: dedup.KeyEventID, Retention: time.Hour,
		EventID: dedup.JSONField("eventId"), Handler: dedup.Forward(),
		Hooks: []dedup.Hook{obs}, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

// worker is a running best-effort runner (goka's runtime, package atleastonce).
type worker struct {
	ready  func() bool // every member of the worker has its partitions (exactly-once)
	leave  func()      // Processor.LeaveGroupOnStop (exactly-once)
	cancel context.CancelFunc
	done   chan error
	sizes  sync.Map // partition -> table size
}

// start runs topo with its state in stateDir until stop.
func (e *env) start(topo *dedup.Topology, stateDir string) *worker {
	e.t.Helper()
	return e.startOn(topo, e.brokers, processor.Security{}, stateDir)
}

// startOn is start on other brokers (another listener), with sec.
func (e *env) startOn(topo *dedup.Topology, brokers []string, sec processor.Security, stateDir string) *worker {
	e.t.Helper()
	return e.startBestEffort(topo, atleastonce.Config{Brokers: brokers, Security: sec, StateDir: stateDir})
}

// startBestEffort is start with cfg; the brokers, the commit interval, the
// replication, the client ID and the logger default to the test's. cfg's
// TableSize and TableClosed are told next to the worker's own bookkeeping.
func (e *env) startBestEffort(topo *dedup.Topology, cfg atleastonce.Config) *worker {
	e.t.Helper()
	w := &worker{done: make(chan error, 1)}
	if cfg.Brokers == nil {
		cfg.Brokers = e.brokers
	}
	if cfg.CommitInterval == 0 {
		cfg.CommitInterval = 100 * time.Millisecond
	}
	if cfg.Replication == 0 {
		cfg.Replication = -1
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "it-" + topo.Group
	}
	if cfg.Logger == nil {
		cfg.Logger = topo.Logger
	}
	size, closed := cfg.TableSize, cfg.TableClosed
	cfg.TableSize = func(p int32, n int64) {
		w.sizes.Store(p, n)
		if size != nil {
			size(p, n)
		}
	}
	cfg.TableClosed = func(p int32) {
		w.sizes.Delete(p)
		if closed != nil {
			closed(p)
		}
	}
	r, err := atleastonce.New(e.t.Context(), cfg, topo)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go func() { w.done <- r.Run(ctx) }()
	e.t.Cleanup(func() { w.stop(e.t) })
	return w
}

func (w *worker) stop(t *testing.T) {
	if w.cancel == nil {
		return
	}
	w.cancel()
	w.cancel = nil
	if err := <-w.done; err != nil {
		t.Errorf("worker: %v", err)
	}
}

func (w *worker) partitionsHeld() (n int) {
	w.sizes.Range(func(_, _ any) bool { n++; return true })
	return n
}

func (w *worker) tableSize() int64 {
	var n int64
	w.sizes.Range(func(_, v any) bool { n += v.(int64); return true })
	return n
}

// produce writes events to the input.
func (e *env) produce(recs ...kafkatest.Record) []kafkatest.Record {
	e.t.Helper()
	out, err := kafkatest.Produce(e.brokers, e.input, recs)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// waitProcessed waits until group has committed everything on the input and
// then on its loop topic: events keyed by aggregate are re-keyed through the
// loop, and the input offset is committed once the loop record is written.
func (e *env) waitProcessed(group string) {
	e.t.Helper()
	if err := e.processedWithin(group, 60*time.Second); err != nil {
		e.t.Fatal(err)
	}
}

// processedWithin is waitProcessed's wait, bounded by timeout.
func (e *env) processedWithin(group string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, topic := range []string{e.input, group + "-loop"} {
		if err := kafkatest.WaitCommitted(ctx, e.brokers, group, topic); err != nil {
			return fmt.Errorf("group %s, topic %s not committed within %v: %w", group, topic, timeout, err)
		}
	}
	return nil
}

// read returns everything committed on topic, once no transaction is open.
func (e *env) read(topic string) []kafkatest.Record {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafkatest.WaitSettled(ctx, e.brokers, topic); err != nil {
		e.t.Fatal(err)
	}
	recs, err := kafkatest.ReadAll(ctx, e.brokers, topic)
	if err != nil {
		e.t.Fatalf("read %s: %v", topic, err)
	}
	return recs
}

// event is an envelope keyed by its aggregate.
func event(id, aggregate string) kafkatest.Record {
	return kafkatest.Record{Key: aggregate, Value: fmt.Appendf(nil, `{"eventId":%q,"aggregateId":%q,"type":"OrderPaid","payload":{"n":1}}`, id, aggregate)}
}

// eventIDs decodes the event IDs of output records, counting each.
func eventIDs(t *testing.T, recs []kafkatest.Record) map[string]int {
	t.Helper()
	ids := map[string]int{}
	for _, r := range recs {
		ev, err := wire.Decoder{ID: wire.DefaultIDSource()}.Decode(r.Value, r.Headers)
		if err != nil {
			t.Fatalf("output record %q: %v", r.Value, err)
		}
		ids[ev.EventID]++
	}
	return ids
}

// describeGroup is group as its coordinator describes it.
func describeGroup(t *testing.T, brokers []string, group string) *sarama.GroupDescription {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(brokers, kafkatest.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	d, err := admin.DescribeConsumerGroups([]string{group})
	if err != nil || len(d) != 1 {
		t.Fatalf("describe group %s: %v", group, err)
	}
	return d[0]
}
