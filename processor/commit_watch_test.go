package processor

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// stallHooks counts CommitStalled.
type stallHooks struct {
	stalls atomic.Int32
}

func (h *stallHooks) OnCommitStalled() { h.stalls.Add(1) }

// lockedBuffer is a log sink the watcher's goroutine and the test share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// A commit held up (here CommitTxn never answered, as with a transaction
// coordinator this instance cannot reach) is reported every transaction
// timeout, with the step it waits in, and no more once it ended.
func TestAStalledCommitIsReportedUntilItEnds(t *testing.T) {
	prod := newCommitProducer(t)
	m := newTestMember(t, prod, 0, 1, 2, 3, 4, 5)
	hooks := &stallHooks{}
	logs := &lockedBuffer{}
	m.hooks, m.log = hookList{hooks}, slog.New(slog.NewTextHandler(logs, nil))
	m.cfg.Transactions.Timeout = 20 * time.Millisecond
	sess := commitSession{benchSession{ctx: t.Context()}}

	handleNow(m, sess, prepared(m, inputMessage(m.topo, 1)))
	m.commit(sess)
	var answer chan error
	select {
	case answer = <-prod.commits:
	case <-time.After(10 * time.Second):
		t.Fatal("no CommitTxn")
	}
	deadline := time.Now().Add(10 * time.Second)
	for hooks.stalls.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d stall reports in 10 s of a commit held open with a 20 ms transaction timeout, want 3", hooks.stalls.Load())
		}
		time.Sleep(5 * time.Millisecond) // polling a counter another goroutine sets
	}
	if l := logs.String(); !strings.Contains(l, "commit stalled") || !strings.Contains(l, `step="ending the transaction"`) {
		t.Fatalf("no warning naming the step:\n%s", l)
	}
	answer <- nil
	m.awaitCommit()
	if m.tx.failed {
		t.Fatalf("the commit failed: %v", m.session.fatal)
	}
	// awaitCommit returned after the watcher exited: nothing may report
	// from now on. Absence has no event to wait for: watch for ten periods.
	after := hooks.stalls.Load()
	time.Sleep(10 * m.cfg.Transactions.Timeout)
	if n := hooks.stalls.Load(); n != after {
		t.Fatalf("%d stall reports after the stalled commit ended, want %d", n, after)
	}
}
