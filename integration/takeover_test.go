package integration

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dedupkit/dedup/processor"
)

// fenceHooks counts the dead members' transactions the leader aborted
// (fenced) and the stuck transactions a member aborted (stuck).
type fenceHooks struct {
	fenced, stuck atomic.Int64
}

func (h *fenceHooks) OnDeadTransactionFenced()  { h.fenced.Add(1) }
func (h *fenceHooks) OnStuckTransactionFenced() { h.stuck.Add(1) }

// A member that dies with a transaction open, and is not restarted, does not
// hold its partitions' next owner back until the broker expires that
// transaction: the group's leader aborts it when it hands the partitions
// out. The dead member's transaction timeout is two minutes here, so without
// that the takeover would need more than waitProcessed's 60 s.
func TestDeadMembersTransactionIsAbortedAtTakeover(t *testing.T) {
	e := newEnv(t, 3)
	group := e.group("eos-takeover")
	in := events("t", 30)
	for i := range in { // keyed by ID: the first transaction holds outputs and changelog records
		in[i].Key = fmt.Sprintf("t-%d", i)
	}
	e.produce(in...)

	var crashed atomic.Bool
	a := e.startEOSWithFault(e.topology(group, &counter{}), processor.Config{StateDir: t.TempDir(),
		Transactions: processor.Transactions{Timeout: 2 * time.Minute}}, func() error {
		crashed.Store(true)
		return errors.New("power cut")
	})
	select {
	case err := <-a.done:
		a.cancel = nil
		if !crashed.Load() || err == nil {
			t.Fatalf("worker ended with %v, want the injected crash", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("no transaction reached the injected fault")
	}
	if hwm := highWaterMarks(t, e.brokers, e.output); hwm == 0 {
		t.Fatal("the crash came before the outputs were produced: no transaction was left open, the test proves nothing")
	}

	// Another instance (its own state dir, so its own instance ID and
	// transactional IDs) takes every partition once the dead one's session
	// timed out.
	hooks := &fenceHooks{}
	start := time.Now()
	e.startEOS(e.topology(group, &counter{}), processor.Config{StateDir: t.TempDir(), Hooks: []processor.Hook{hooks}})
	e.waitProcessed(group)
	took := time.Since(start)
	e.exactlyOnce(in)
	if n := hooks.fenced.Load(); n == 0 {
		t.Fatal("the new leader fenced no transaction; the takeover ended without it")
	}
	t.Logf("took over and processed everything %v after the new instance started (dead member's session timeout 3s); "+
		"%d dead transaction(s) aborted", took.Round(time.Millisecond), hooks.fenced.Load())
}
