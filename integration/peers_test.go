package integration

import (
	"testing"
	"time"
)

// An instance killed with its transaction open holds the loop partitions
// of the live instances until someone aborts that transaction. Its peers
// hold a liveness connection to it (--peer-addr): the connection ends with
// the process, its address then refuses, and the survivor aborts what the
// dead one left open at once. Here the stuck watch is off
// (--fence-stuck-after at the transaction timeout), so the death can only
// have been told by the liveness connection; the events streamed across
// the kill must still come out exactly once.
func TestPeersNoticeAKilledInstance(t *testing.T) {
	e := newEnv(t, 6)
	bin := buildProcessor(t)
	group := e.group("eos-peers")
	args := func(id string) []string {
		return workerArgs(e, group, t.TempDir(), "--instance-id", id, "--session-timeout", "6s",
			"--fence-stuck-after", "10s", "--peer-addr", "127.0.0.1:0")
	}
	a := startProc(t, bin, args("a")...)
	b := startProc(t, bin, args("b")...)
	for _, p := range []*proc{a, b} {
		p.waitMetric("dedup_peers_watched", 60*time.Second, func(v float64) bool { return v == 1 })
	}

	done := e.streamInBackground("peer", 3000, 100*time.Millisecond)
	b.waitMetric("dedup_events_processed_total", 60*time.Second, func(v float64) bool { return v > 0 })
	b.kill()
	a.waitMetric("dedup_peer_deaths_total", 30*time.Second, func(v float64) bool { return v >= 1 })
	fenced := a.metric("dedup_peer_transactions_fenced_total")

	s := <-done
	if s.err != nil {
		t.Fatal(s.err)
	}
	e.waitProcessed(group)
	ids := eventIDs(t, e.read(e.output))
	for id := range eventIDs(t, s.recs) {
		if ids[id] != 1 {
			t.Errorf("event %s in the output %d times, want 1", id, ids[id])
		}
	}
	if len(ids) != len(eventIDs(t, s.recs)) {
		t.Errorf("%d distinct events in the output, %d streamed", len(ids), len(eventIDs(t, s.recs)))
	}
	if got := a.metric("dedup_peer_deaths_total"); got != 1 {
		t.Errorf("the survivor counted %v deaths, want the one kill", got)
	}
	t.Logf("the survivor saw the kill through the liveness connection and aborted %v open transactions of the dead instance", fenced)
	a.term()
}
