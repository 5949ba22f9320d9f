package integration

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/internal/kafkautil"
	"github.com/dedupkit/dedup/internal/tablefile"
	"github.com/dedupkit/dedup/processor"
)

// tableHooks records the runtime's table sizes and sweeps.
type tableHooks struct {
	mu    sync.Mutex
	sizes map[int32]int64
	swept int
}

func (h *tableHooks) OnTableSize(p int32, n int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sizes == nil {
		h.sizes = map[int32]int64{}
	}
	h.sizes[p] = n
}

func (h *tableHooks) OnPartitionRevoked(p int32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.sizes, p)
}

// held is the partitions the member reports a table for.
func (h *tableHooks) held() map[int32]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	held := map[int32]bool{}
	for p := range h.sizes {
		held[p] = true
	}
	return held
}

func (h *tableHooks) OnSwept(_ int32, n int) { h.mu.Lock(); h.swept += n; h.mu.Unlock() }

func (h *tableHooks) state() (entries int64, swept int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range h.sizes {
		entries += n
	}
	return entries, h.swept
}

// until polls cond (state of another goroutine or of the broker) until it
// holds or the timeout passes.
func until(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// liveValues counts the changelog's keys whose latest committed record is a
// value (not a tombstone), and the non-null records still in the log.
func liveValues(t *testing.T, brokers []string, topic string) (live, values int) {
	t.Helper()
	// A transaction's records are read_committed only once its markers are
	// written, after the commit returned.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafkatest.WaitSettled(ctx, brokers, topic); err != nil {
		t.Fatal(err)
	}
	recs, err := kafkatest.ReadAll(ctx, brokers, topic)
	if err != nil {
		t.Fatal(err)
	}
	latest := map[string]bool{}
	for _, r := range recs {
		latest[r.Key] = r.Value != nil
		if r.Value != nil {
			values++
		}
	}
	for _, v := range latest {
		if v {
			live++
		}
	}
	return live, values
}

func TestExpiredRecordsAreSweptCompactedAndNotRestored(t *testing.T) {
	e := newEnv(t, 2)
	group := e.group("expiry")
	topo := e.topology(group, &counter{})
	topo.Retention = 2 * time.Second
	// The table topic, made compactable within the test's time.
	admin, err := sarama.NewClusterAdmin(e.brokers, kafkatest.Config())
	if err != nil {
		t.Fatal(err)
	}
	err = kafkautil.CreateTopic(admin, topo.TableTopic(), 2, -1, map[string]string{
		"cleanup.policy": "compact", "segment.ms": "1000", "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "600000"})
	admin.Close()
	if err != nil {
		t.Fatal(err)
	}

	state := t.TempDir()
	hooks := &tableHooks{}
	cfg := processor.Config{StateDir: state, Sweep: processor.Sweep{Interval: 300 * time.Millisecond}, Hooks: []processor.Hook{hooks}}
	w := e.startEOS(topo, cfg)
	in := events("x", 50)
	for i := range in {
		in[i].Key = fmt.Sprintf("x-%d", i) // keyed by ID: no loop
	}
	e.produce(in...)
	e.waitProcessed(group)
	if live, _ := liveValues(t, e.brokers, topo.TableTopic()); live != 50 {
		t.Fatalf("changelog holds %d live records after processing, want 50", live)
	}

	until(t, 30*time.Second, "the sweeper to delete every expired record", func() bool {
		entries, swept := hooks.state()
		return entries == 0 && swept == 50
	})
	if live, _ := liveValues(t, e.brokers, topo.TableTopic()); live != 0 {
		t.Fatalf("changelog still has %d live records after the sweep", live)
	}

	// Compaction removes the values; new events roll segments meanwhile.
	bump := 0
	until(t, 90*time.Second, "compaction to remove the expired values from the changelog", func() bool {
		bump++
		e.produce(event(fmt.Sprintf("bump-%d", bump), "b"))
		_, values := liveValues(t, e.brokers, topo.TableTopic())
		return values <= bump // only the bump events' own records may remain
	})

	// A fresh instance restores from the changelog: nothing expired returns.
	w.stop(t)
	state2 := t.TempDir()
	w2 := e.startEOS(e.topology(group, &counter{}), processor.Config{StateDir: state2, Sweep: processor.Sweep{Interval: time.Hour}})
	e.produce(in[0]) // one event to know the restore is done
	e.waitProcessed(group)
	w2.stop(t)
	for p := int32(0); p < 2; p++ {
		err := tablefile.Read(state2, topo.TableTopic(), p, func(key string, _ []byte) error {
			// x-0 was processed again (its record had expired); no other
			// expired record may come back.
			if strings.HasPrefix(key, "x-") && key != "x-0" {
				return fmt.Errorf("expired record %q restored", key)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("partition %d: %v", p, err)
		}
	}
	if ids := eventIDs(t, e.read(e.output)); ids["x-0"] != 2 {
		t.Fatalf("x-0 output %d times; after its record expired it must be processed again (2)", ids["x-0"])
	}
}

func TestStaleEventPolicies(t *testing.T) {
	for _, policy := range []dedup.StalePolicy{dedup.StaleProcess, dedup.StaleSkip, dedup.StaleDeadLetter} {
		t.Run(string(policy), func(t *testing.T) {
			e := newEnv(t, 1)
			group := e.group("stale")
			obs := &counter{}
			topo := e.topology(group, obs)
			topo.StaleEvents = policy
			e.startEOS(topo, processor.Config{StateDir: t.TempDir()})
			old := time.Now().Add(-48 * time.Hour).UTC().Format(time.RFC3339)
			e.produce(
				kafkatest.Record{Key: "s1", Value: fmt.Appendf(nil, `{"eventId":"s1","occurredAt":%q}`, old)},
				event("fresh", "fresh"))
			e.waitProcessed(group)

			ids := eventIDs(t, e.read(e.output))
			dlq := e.read(topo.DLQ)
			wantOut, wantDLQ := map[dedup.StalePolicy]int{dedup.StaleProcess: 1}[policy], map[dedup.StalePolicy]int{dedup.StaleDeadLetter: 1}[policy]
			if ids["s1"] != wantOut || ids["fresh"] != 1 || len(dlq) != wantDLQ {
				t.Fatalf("stale event output %d times (want %d), fresh %d, dead letters %d (want %d)", ids["s1"], wantOut, ids["fresh"], len(dlq), wantDLQ)
			}
			if wantDLQ == 1 && string(dlq[0].Headers[dedup.HeaderDLQReason]) != dedup.ReasonTooOld {
				t.Fatalf("dead letter reason %q", dlq[0].Headers[dedup.HeaderDLQReason])
			}
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if obs.tooOld != 1 {
				t.Fatalf("too-old counted %d times, want 1", obs.tooOld)
			}
		})
	}
}

func TestRetentionWarningAndStrictRefusal(t *testing.T) {
	e := newEnv(t, 1) // broker default retention.ms: 7 days
	bin := buildProcessor(t)
	group := e.group("ret")
	p := startProc(t, bin, workerArgs(e, group, t.TempDir(), "--retention", "1h")...)
	p.term()
	if !strings.Contains(p.logs.String(), "--retention 1h0m0s is shorter than retention.ms") {
		t.Fatalf("no retention warning in the logs:\n%s", p.logs.String())
	}

	out, err := exec.Command(bin, append([]string{"run"}, workerArgs(e, group, t.TempDir(), "--retention", "1h", "--strict-retention")...)...).CombinedOutput()
	if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != 1 {
		t.Fatalf("strict refusal: exit %v, want status 1\n%s", err, out)
	}
	if !strings.Contains(string(out), "refused by --strict-retention") || !strings.Contains(string(out), "168h0m0s") {
		t.Fatalf("refusal does not name both retentions:\n%s", out)
	}
}
