package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/processor"
)

// slowHandler sleeps for delay() per call, honouring its ctx, counts the
// calls per event ID, and forwards the event.
type slowHandler struct {
	delay func() time.Duration
	mu    sync.Mutex
	calls map[string]int
}

func newSlowHandler(delay func() time.Duration) *slowHandler {
	return &slowHandler{delay: delay, calls: map[string]int{}}
}

func (h *slowHandler) Handle(ctx context.Context, ev *dedup.Event) ([]dedup.Message, error) {
	t := time.NewTimer(h.delay())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
	}
	h.mu.Lock()
	h.calls[ev.EventID]++
	h.mu.Unlock()
	return []dedup.Message{{Key: ev.EventID, Value: ev.Value}}, nil
}

// twice lists the event IDs whose handler completed more than once.
func (h *slowHandler) twice() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ids []string
	for id, n := range h.calls {
		if n > 1 {
			ids = append(ids, fmt.Sprintf("%s x%d", id, n))
		}
	}
	return ids
}

// txnHooks counts what must not happen to a live instance.
type txnHooks struct {
	fenced, aborted, stuckFenced, deadFenced atomic.Int64
}

func (h *txnHooks) OnFenced()                 { h.fenced.Add(1) }
func (h *txnHooks) OnTxnAborted(string)       { h.aborted.Add(1) }
func (h *txnHooks) OnStuckTransactionFenced() { h.stuckFenced.Add(1) }
func (h *txnHooks) OnDeadTransactionFenced()  { h.deadFenced.Add(1) }

func (h *txnHooks) check(t *testing.T) {
	t.Helper()
	if n := h.fenced.Load(); n > 0 {
		t.Errorf("a live instance was fenced %d times", n)
	}
	if n := h.aborted.Load(); n > 0 {
		t.Errorf("%d transactions aborted", n)
	}
	if n := h.stuckFenced.Load() + h.deadFenced.Load(); n > 0 {
		t.Errorf("instances fenced %d transactions of others as stuck or dead, and none died", n)
	}
}

// txnWatch polls the broker for the group's open transactions and keeps the
// longest time one stayed open: its start time (the coordinator's clock)
// against this host's clock at the last poll that saw it open. The broker
// runs on this host, so the two clocks are one.
type txnWatch struct {
	longest atomic.Int64 // nanoseconds
	stop    context.CancelFunc
	done    chan struct{}
}

func watchTransactions(t *testing.T, brokers []string, group string) *txnWatch {
	conf := kafkatest.Config()
	conf.Version = sarama.V3_0_0_0 // ListTransactions
	client, err := sarama.NewClient(brokers, conf)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &txnWatch{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer admin.Close()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			w.poll(client, admin, group)
		}
	}()
	t.Cleanup(w.end)
	return w
}

func (w *txnWatch) poll(client sarama.Client, admin sarama.ClusterAdmin, group string) {
	var ids []string
	for _, b := range client.Brokers() {
		_ = b.Open(client.Config())
		req := sarama.NewListTransactionsRequest(client.Config().Version)
		req.StateFilters = []string{sarama.TransactionStateOngoing}
		resp, err := b.ListTransactions(req)
		if err != nil {
			continue
		}
		for _, s := range resp.TransactionStates {
			if len(s.TransactionalID) > len(group) && s.TransactionalID[:len(group)+1] == group+"-" {
				ids = append(ids, s.TransactionalID)
			}
		}
	}
	if len(ids) == 0 {
		return
	}
	describer, ok := admin.(interface {
		DescribeTransactions([]string) (map[string]sarama.TransactionState, error)
	})
	if !ok {
		return
	}
	states, _ := describer.DescribeTransactions(ids)
	now := time.Now()
	for _, s := range states {
		if s.TransactionState != sarama.TransactionStateOngoing || s.TransactionStartTime <= 0 {
			continue
		}
		age := now.Sub(time.UnixMilli(s.TransactionStartTime))
		for {
			old := w.longest.Load()
			if int64(age) <= old || w.longest.CompareAndSwap(old, int64(age)) {
				break
			}
		}
	}
}

func (w *txnWatch) end() {
	w.stop()
	<-w.done
}

// slowRun starts n instances of a group whose handler is h, produces events
// keyed by aggregate (so most are re-keyed through the loop topic) and waits
// up to within for the group to commit them.
func slowRun(t *testing.T, e *env, prefix string, instances, events int, h dedup.Handler, within time.Duration) (*txnHooks, *txnWatch, []kafkatest.Record) {
	group := e.group(prefix)
	hooks := &txnHooks{}
	watch := watchTransactions(t, e.brokers, group)
	in := e.produce(eventsOf(prefix, events)...)
	start := time.Now()
	for i := range instances {
		topo := e.topology(group, &counter{})
		topo.Handler = h
		e.startEOS(topo, processor.Config{StateDir: t.TempDir(), InstanceID: fmt.Sprintf("slow-%d", i), Hooks: []processor.Hook{hooks}})
	}
	if err := e.processedWithin(group, within); err != nil {
		t.Fatalf("%v (handled for %v)", err, time.Since(start).Round(time.Second))
	}
	t.Logf("%d events through %d instance(s) in %v; longest open transaction %v", events, instances,
		time.Since(start).Round(100*time.Millisecond), time.Duration(watch.longest.Load()).Round(time.Millisecond))
	return hooks, watch, in
}

func eventsOf(prefix string, n int) []kafkatest.Record {
	recs := make([]kafkatest.Record, n)
	for i := range recs {
		recs[i] = event(fmt.Sprintf("%s-%d", prefix, i), fmt.Sprintf("agg-%d", i%97))
	}
	return recs
}

// A handler of seconds per call, with default settings, on 12 partitions:
// the group finishes in about events / instances x the call, no transaction
// stays open past the commit interval plus a call, and no live instance is
// fenced, by the coordinator (transaction timeout) or by its own group.
func TestSlowHandlerFinishes(t *testing.T) {
	cases := []struct {
		name      string
		instances int
		events    int
		call      time.Duration
	}{
		{"3s-one-instance", 1, 12, 3 * time.Second},
		{"3s-three-instances", 3, 12, 3 * time.Second},
		{"15s-past-the-transaction-timeout", 1, 2, 15 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 12)
			h := newSlowHandler(func() time.Duration { return c.call })
			// Events spread unevenly over instances: the bound allows
			// for one instance with twice its share.
			within := time.Duration(2*c.events/c.instances)*c.call + 30*time.Second
			if c.instances == 1 {
				within = time.Duration(c.events)*c.call + 30*time.Second
			}
			hooks, watch, in := slowRun(t, e, "slow", c.instances, c.events, h, within)
			hooks.check(t)
			if twice := h.twice(); len(twice) > 0 {
				t.Errorf("handled more than once: %v", twice)
			}
			bound := processor.DefaultCommitInterval + c.call + time.Second // a commit's round trips and a poll
			if got := time.Duration(watch.longest.Load()); got > bound {
				t.Errorf("a transaction stayed open %v, more than the commit interval plus one call (%v)", got, bound)
			}
			e.exactlyOnce(in)
		})
	}
}

// A backlog of events and a handler of milliseconds, on two instances with
// default settings: every event is handled once, no transaction stays open
// past the commit interval plus a call, no live instance is fenced.
func TestBacklogWithAMillisecondsHandler(t *testing.T) {
	e := newEnv(t, 12)
	h := newSlowHandler(func() time.Duration { return time.Duration(2+rand.IntN(19)) * time.Millisecond })
	const events = 10_000
	// 10k calls of 11 ms on average are about 110 s on one instance.
	hooks, watch, in := slowRun(t, e, "backlog", 2, events, h, 3*time.Minute)
	hooks.check(t)
	if twice := h.twice(); len(twice) > 0 {
		t.Errorf("%d events handled more than once: %v", len(twice), twice[:min(10, len(twice))])
	}
	bound := processor.DefaultCommitInterval + 20*time.Millisecond + time.Second
	if got := time.Duration(watch.longest.Load()); got > bound {
		t.Errorf("a transaction stayed open %v, more than the commit interval plus one call (%v)", got, bound)
	}
	e.exactlyOnce(in)
}
