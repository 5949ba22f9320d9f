package processor

import (
	"testing"
	"time"
)

// A transaction's first AddPartitionsToTxn waits out CONCURRENT_TRANSACTIONS
// while the last commit's markers are written. Every event of the
// transaction waits with it, so the retry after the markers are done must
// come soon, however long they took, within the quick phase.
func TestTxnBackoffOvershootsAMarkerWriteByAtMost20ms(t *testing.T) {
	for _, markers := range []time.Duration{time.Millisecond, 7 * time.Millisecond, 40 * time.Millisecond,
		90 * time.Millisecond, 160 * time.Millisecond, 300 * time.Millisecond} {
		var waited time.Duration
		retries := 0
		for ; waited < markers; retries++ {
			waited += txnBackoff(retries, txnRetries)
		}
		if retries > txnQuickRetries {
			t.Fatalf("markers of %v: %d retries, past the quick phase (%d)", markers, retries, txnQuickRetries)
		}
		if over := waited - markers; over > 20*time.Millisecond {
			t.Errorf("markers written after %v: retried at %v, %v late", markers, waited, over)
		}
	}
}

// The whole retry budget must outlast a coordinator moving after a broker
// died (a fenced broker's partitions get new leaders within seconds) without
// hammering it.
func TestTxnBackoffBudget(t *testing.T) {
	var total time.Duration
	for r := 0; r < txnRetries; r++ {
		d := txnBackoff(r, txnRetries)
		if d <= 0 || d > 200*time.Millisecond {
			t.Fatalf("retry %d: backoff %v, want in (0, 200ms]", r, d)
		}
		total += d
	}
	if total < 15*time.Second || total > 30*time.Second {
		t.Errorf("retry budget %v, want 15-30 s", total)
	}
}
