package integration

import (
	"syscall"
	"testing"
	"time"
)

// An instance stopped (SIGSTOP) past its session timeout loses its
// partitions to the other instance; when it resumes it is a zombie: its
// transaction is fenced and none of its later outputs become visible.
func TestZombieInstanceIsFenced(t *testing.T) {
	e := newEnv(t, 6)
	bin := buildProcessor(t)
	group := e.group("zombie")
	a := startProc(t, bin, workerArgs(e, group, t.TempDir(), "--session-timeout", "3s")...)
	b := startProc(t, bin, workerArgs(e, group, t.TempDir(), "--session-timeout", "3s")...)

	done := e.streamInBackground("z", 3000, 100*time.Millisecond)

	// Both own partitions and work before A is frozen.
	a.waitMetric("dedup_events_processed_total", 30*time.Second, func(v float64) bool { return v > 0 })
	b.waitMetric("dedup_events_processed_total", 30*time.Second, func(v float64) bool { return v > 0 })
	rebalancesB := b.metric("dedup_rebalances_total")

	a.cmd.Process.Signal(syscall.SIGSTOP)
	// B takes A's partitions once A's session has timed out.
	b.waitMetric("dedup_rebalances_total", 60*time.Second, func(v float64) bool { return v > rebalancesB })
	b.waitMetric("dedup_events_processed_total", 30*time.Second, func(v float64) bool { return v > 0 })
	a.cmd.Process.Signal(syscall.SIGCONT)

	// A's next commit carries a stale generation: fenced, aborted.
	fenced := a.waitMetric("dedup_fencings_total", 60*time.Second, func(v float64) bool { return v >= 1 })
	s := <-done
	if s.err != nil {
		t.Fatal(s.err)
	}
	e.waitProcessed(group)
	a.term()
	b.term()
	e.exactlyOnce(s.recs)
	t.Logf("zombie fenced %v time(s); %d events exactly once", fenced, len(s.recs))
}
