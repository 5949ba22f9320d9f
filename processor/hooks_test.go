package processor

import (
	"testing"
	"time"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/checks"
	"github.com/dedupkit/dedup/internal/metrics"
)

// The worker's metrics are told every event of the runtime and of the
// topology: a new event without its metric does not compile.
var (
	_ HookTxnCommitted           = (*metrics.Runtime)(nil)
	_ HookTxnAborted             = (*metrics.Runtime)(nil)
	_ HookCommitStalled          = (*metrics.Runtime)(nil)
	_ HookFenced                 = (*metrics.Runtime)(nil)
	_ HookDeadTransactionFenced  = (*metrics.Runtime)(nil)
	_ HookStuckTransactionFenced = (*metrics.Runtime)(nil)
	_ HookPeersWatched           = (*metrics.Runtime)(nil)
	_ HookInstanceDied           = (*metrics.Runtime)(nil)
	_ HookRebalanced             = (*metrics.Runtime)(nil)
	_ HookRebalanceCompleted     = (*metrics.Runtime)(nil)
	_ HookConsumerLag            = (*metrics.Runtime)(nil)
	_ HookTableOpened            = (*metrics.Runtime)(nil)
	_ HookRestoreProgress        = (*metrics.Runtime)(nil)
	_ HookTableSize              = (*metrics.Runtime)(nil)
	_ HookKeyFilterBytes         = (*metrics.Runtime)(nil)
	_ HookSwept                  = (*metrics.Runtime)(nil)
	_ HookPartitionRevoked       = (*metrics.Runtime)(nil)
	_ HookStandbyLag             = (*metrics.Runtime)(nil)
	_ HookCallStarted            = (*metrics.Runtime)(nil)
	_ HookCallEnded              = (*metrics.Runtime)(nil)
	_ HookKeyWaited              = (*metrics.Runtime)(nil)
	_ dedup.HookProcessed        = (*metrics.Metrics)(nil)
	_ dedup.HookSkipped          = (*metrics.Metrics)(nil)
	_ dedup.HookExpired          = (*metrics.Metrics)(nil)
	_ dedup.HookTooOld           = (*metrics.Metrics)(nil)
	_ dedup.HookDeadLettered     = (*metrics.Metrics)(nil)
	_ dedup.HookHandlerError     = (*metrics.Metrics)(nil)
	_ dedup.HookRekeyed          = (*metrics.Metrics)(nil)
)

// commitCounter is a hook written when the runtime told only of commits
// and aborts: events added since (HookKeyWaited, ...) must not break it.
type commitCounter struct {
	commits, records int
	aborts           []string
}

func (c *commitCounter) OnTxnCommitted(_ time.Duration, records int) {
	c.commits++
	c.records += records
}
func (c *commitCounter) OnTxnAborted(reason string) { c.aborts = append(c.aborts, reason) }

// A hook is told the events it implements and nothing else; a value that
// implements none is no error.
func TestHookListTellsWhatEachHookImplements(t *testing.T) {
	older, other := &commitCounter{}, &commitCounter{}
	l := hookList{older, struct{}{}, other}
	l.TxnCommitted(time.Millisecond, 3)
	l.KeyWaited(time.Second)
	l.TxnAborted("fenced")
	l.CallStarted()
	for i, c := range []*commitCounter{older, other} {
		if c.commits != 1 || c.records != 3 || len(c.aborts) != 1 || c.aborts[0] != "fenced" {
			t.Errorf("hook %d told %+v, want one commit of 3 records and one abort for fenced", i, *c)
		}
	}
	var none hookList
	none.TxnCommitted(time.Millisecond, 1) // no hooks: nothing to tell
}

// Config.Hooks takes such a hook as it is.
var _ = Config{Hooks: []Hook{&commitCounter{}}}

// The binary checks its flags by the runtime's rule.
func TestMinPeerSecretIsTheChecksOne(t *testing.T) {
	if MinPeerSecret != checks.MinPeerSecret {
		t.Fatalf("MinPeerSecret %d, the flags' check %d", MinPeerSecret, checks.MinPeerSecret)
	}
}
