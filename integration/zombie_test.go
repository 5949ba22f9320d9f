package integration

import (
	"syscall"
	"testing"
	"time"
)

// An instance stopped (SIGSTOP) past its session timeout loses its
// partitions to the other instance; when it resumes it is a zombie: its
// transaction is fenced and none of its later outputs become visible.
//
// A commits every 30 s, so it is frozen with an open transaction holding
// records: with the default 100 ms it was sometimes frozen just after a
// commit, resumed with nothing to commit, rejoined without being fenced, and
// the test failed. A zombie's open transaction is fenced either way: its
// offsets carry a stale group generation, or the coordinator aborted it
// after the 10 s transaction timeout and bumped the producer's epoch.
func TestZombieInstanceIsFenced(t *testing.T) {
	e := newEnv(t, 6)
	bin := buildProcessor(t)
	group := e.group("zombie")
	a := startProc(t, bin, workerArgs(e, group, t.TempDir(), "--session-timeout", "3s", "--commit-interval", "30s")...)
	b := startProc(t, bin, workerArgs(e, group, t.TempDir(), "--session-timeout", "3s")...)

	done := e.streamInBackground("z", 3000, 100*time.Millisecond)

	// Both own partitions and work before A is frozen.
	a.waitMetric("dedup_events_processed_total", 30*time.Second, func(v float64) bool { return v > 0 })
	b.waitMetric("dedup_events_processed_total", 30*time.Second, func(v float64) bool { return v > 0 })
	rebalancesB := b.metric("dedup_rebalances_total")
	fencedBefore := a.metric("dedup_fencings_total")

	a.cmd.Process.Signal(syscall.SIGSTOP)
	// B takes A's partitions once A's session has timed out.
	b.waitMetric("dedup_rebalances_total", 60*time.Second, func(v float64) bool { return v > rebalancesB })
	b.waitMetric("dedup_events_processed_total", 30*time.Second, func(v float64) bool { return v > 0 })
	a.cmd.Process.Signal(syscall.SIGCONT)

	// A's next commit carries a stale generation: fenced, aborted.
	fenced := a.waitMetric("dedup_fencings_total", 60*time.Second, func(v float64) bool { return v > fencedBefore })
	// A rejoined; stopping it commits what it holds, so the group finishes
	// without waiting for A's 30 s interval.
	a.term()
	s := <-done
	if s.err != nil {
		t.Fatal(s.err)
	}
	e.waitProcessed(group)
	b.term()
	e.exactlyOnce(s.recs)
	t.Logf("zombie fenced %v time(s); %d events exactly once", fenced, len(s.recs))
}
