package integration

import (
	"net"
	"os"
	"testing"
	"time"

	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/internal/netfault"
)

// proxyRoutes reads KAFKA_PROXY_ROUTES: where a fault proxy listens (the
// addresses a broker listener advertises) and what it forwards to (that
// listener). `make test` sets it from `kafka.sh proxy-routes`; against a
// cluster of your own, give each broker a listener whose advertised address
// nothing listens on and route it, e.g. KAFKA_PROXY_ROUTES=host:9392=host:9292.
func proxyRoutes(t *testing.T) []netfault.Route {
	t.Helper()
	v := os.Getenv("KAFKA_PROXY_ROUTES")
	if v == "" {
		kafkatest.Missing(t, "KAFKA_PROXY_ROUTES is not set; `make test` sets it from kafka.sh proxy-routes")
	}
	routes, err := netfault.ParseRoutes(v)
	if err != nil {
		t.Fatalf("KAFKA_PROXY_ROUTES: %v", err)
	}
	// A broker started by a kafka.sh older than its PROXIED listener has no
	// target to forward to; say so instead of timing out in the worker.
	for _, r := range routes {
		c, err := net.DialTimeout("tcp", r.Target, 5*time.Second)
		if err != nil {
			t.Fatalf("KAFKA_PROXY_ROUTES: no broker listener at %s (%v); a broker started before kafka.sh had "+
				"the PROXIED listener needs a restart: make kafka-down kafka-up", r.Target, err)
		}
		c.Close()
	}
	return routes
}

// An instance cut off from the brokers by a network partition goes on
// running, unlike a killed or stopped one: its loop holds an open
// transaction with records in it, and its heartbeats and requests fail
// (reset) or hang (blackhole). The other instance takes its partitions once
// its session has timed out. When the network comes back, nothing of the
// cut-off instance's transaction may become visible, and it must rejoin the
// group and process again without a restart.
//
// The cases differ in what the cut-off instance A sends when the network
// comes back. reset: A saw its connections close and reconnects. blackhole:
// the requests A sent while cut off (its commit among them) reach the broker
// late, after B took over. blackhole past A's timeouts: A's requests time
// out first (sarama's 30 s read timeout) and A closes their connections, and
// by then A's transaction has been aborted (B fences it as stuck, or the
// coordinator after the 10 s transaction timeout) and its producer's epoch
// bumped.
//
// A commits every 30 s, as in TestZombieInstanceIsFenced, so that it is cut
// off holding records: with 100 ms it could be cut off just after a commit,
// with nothing to fence.
func TestNetworkPartitionedInstance(t *testing.T) {
	routes := proxyRoutes(t)
	bin := buildProcessor(t)
	for _, tc := range []struct {
		name string
		cut  func(*netfault.Proxy)
		// healAfterTimeout: heal once A's own requests timed out, not as
		// soon as B took A's partitions.
		healAfterTimeout bool
	}{
		{"reset", (*netfault.Proxy).Reset, false},
		{"blackhole", (*netfault.Proxy).Blackhole, false},
		{"blackhole past timeouts", (*netfault.Proxy).Blackhole, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 6)
			px, err := netfault.Start(routes)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { px.Close() })
			group := e.group("partition")
			a := startProc(t, bin, append(workerArgs(e, group, t.TempDir(), "--session-timeout", "3s",
				"--commit-interval", "30s"), "--brokers", px.Addrs())...)
			b := startProc(t, bin, workerArgs(e, group, t.TempDir(), "--session-timeout", "3s")...)

			first := e.streamInBackground("np1", 1500, 50*time.Millisecond)
			a.waitMetric("dedup_events_processed_total", 60*time.Second, func(v float64) bool { return v > 0 })
			b.waitMetric("dedup_events_processed_total", 60*time.Second, func(v float64) bool { return v > 0 })
			// B's first events mean A committed at the rebalance that let B
			// in; what A processes from here is in its open transaction.
			processedA := a.metric("dedup_events_processed_total")
			a.waitMetric("dedup_events_processed_total", 60*time.Second, func(v float64) bool { return v > processedA })
			rebalancesA, rebalancesB := a.metric("dedup_rebalances_total"), b.metric("dedup_rebalances_total")
			abortedA := a.metric("dedup_transactions_aborted_total")

			tc.cut(px)
			// B takes A's partitions once A's session has timed out.
			b.waitMetric("dedup_rebalances_total", 60*time.Second, func(v float64) bool { return v > rebalancesB })
			rebalancesB = b.metric("dedup_rebalances_total")
			if tc.healAfterTimeout {
				// Which of A's clients times out first, and whether it logs,
				// depends on what A had in flight at the cut (a fetch, a
				// heartbeat, a produce); every one closes its connection.
				until(t, 90*time.Second, "A to close a connection it had waited on", func() bool { return px.GaveUp() > 0 })
			}
			px.Heal()

			// A's transaction is aborted, not committed: fenced, or failed
			// on the cut connections.
			a.waitMetric("dedup_transactions_aborted_total", 90*time.Second, func(v float64) bool { return v > abortedA })
			// A rejoins by itself: a new session, and B gives partitions back.
			a.waitMetric("dedup_rebalances_total", 90*time.Second, func(v float64) bool { return v > rebalancesA })
			b.waitMetric("dedup_rebalances_total", 60*time.Second, func(v float64) bool { return v > rebalancesB })
			s1 := <-first
			if s1.err != nil {
				t.Fatal(s1.err)
			}
			// ... and processes new events on the partitions it got back.
			processedA = a.metric("dedup_events_processed_total")
			s2, err := e.stream("np2", 300, 10*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			a.waitMetric("dedup_events_processed_total", 60*time.Second, func(v float64) bool { return v > processedA })
			fenced := a.metric("dedup_fencings_total")

			// Stopping A commits what it holds, so the group finishes without
			// waiting for A's 30 s interval.
			a.term()
			e.waitProcessed(group)
			b.term()
			e.exactlyOnce(append(s1.recs, s2...))
			t.Logf("%s: A's transaction aborted (fenced %v time(s)); %d events exactly once",
				tc.name, fenced, len(s1.recs)+len(s2))
		})
	}
}
