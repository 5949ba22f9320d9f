package integration

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/internal/netfault"
)

// A partial partition: instance A loses one broker only and keeps the
// others, so unlike TestNetworkPartitionedInstance it may go on
// heartbeating (when the group coordinator is elsewhere) and keep its
// partitions while its records to that broker's partitions hang. Its
// transaction cannot commit, the coordinator aborts it after the
// transaction timeout and bumps the producer's epoch, and when the broker
// is reachable again A must find itself fenced, replace its producer,
// rejoin and process again, without a restart and without losing or
// doubling an event. (When the cut broker is A's transaction coordinator
// and the cut comes before the transaction added a partition there, no
// transaction is open to time out, and A's commit goes through once the
// broker answers again: also correct.) Each case cuts a different broker,
// so the group coordinator, the transaction coordinator and partition
// leaders are each cut in some case (where they sit is the cluster's
// choice; the log says).
//
// Needs three brokers, each with a listener routed by KAFKA_PROXY_ROUTES:
// `make test` runs it against a three-node cluster of its own
// (`make test-cluster`); against the single broker it skips.
func TestPartialPartitionFromOneBroker(t *testing.T) {
	routes := proxyRoutes(t)
	if len(routes) < 3 {
		kafkatest.Missing(t, "needs three brokers in KAFKA_PROXY_ROUTES, got %d; `make test-cluster` starts them", len(routes))
	}
	bin := buildProcessor(t)
	for cut := range routes {
		t.Run("cut "+routes[cut].Target, func(t *testing.T) {
			e := newEnv(t, 6)
			// One proxy per broker, so that one can be cut alone.
			var pxs []*netfault.Proxy
			var addrs []string
			for _, r := range routes {
				px, err := netfault.Start([]netfault.Route{r})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { px.Close() })
				pxs = append(pxs, px)
				addrs = append(addrs, px.Addrs())
			}
			group := e.group("partial")
			a := startProc(t, bin, append(workerArgs(e, group, t.TempDir(), "--session-timeout", "3s"),
				"--brokers", strings.Join(addrs, ","))...)
			b := startProc(t, bin, workerArgs(e, group, t.TempDir(), "--session-timeout", "3s")...)

			// The load goes on well into the cut, so A holds records for
			// the cut broker's partitions when it is cut.
			first := e.streamInBackground("pp1", 2400, 250*time.Millisecond)
			a.waitMetric("dedup_events_processed_total", 60*time.Second, func(v float64) bool { return v > 0 })
			b.waitMetric("dedup_events_processed_total", 60*time.Second, func(v float64) bool { return v > 0 })
			abortedA, rebalancesA := a.metric("dedup_transactions_aborted_total"), a.metric("dedup_rebalances_total")
			stallsA := a.metric("dedup_commit_stalls_total")
			processedA := a.metric("dedup_events_processed_total")
			cutRoles, cutsTxnCoordinator := roles(addrs, routes[cut].Listen, group, e.output, a.logs.String())
			t.Logf("cutting A off %s: %s", routes[cut].Target, cutRoles)

			pxs[cut].Blackhole()
			// The fault's length, not a wait for a condition: past sarama's
			// 30 s request timeout and the 10 s transaction timeout.
			time.Sleep(35 * time.Second)
			t.Logf("healing: A processed %v events during the cut, rebalanced %v times, aborted %v transactions",
				a.metric("dedup_events_processed_total")-processedA, a.metric("dedup_rebalances_total")-rebalancesA,
				a.metric("dedup_transactions_aborted_total")-abortedA)
			// A's commit hung, and A said so (commit_watch.go).
			if a.metric("dedup_commit_stalls_total") <= stallsA {
				t.Errorf("no commit stall reported in a 35 s cut\n%s", tail(a.logs.String(), 30))
			}
			committedA := a.metric("dedup_transactions_committed_total")
			pxs[cut].Heal()
			healed := time.Now()

			// A's transaction is aborted, not committed, and A works again:
			// the coordinator aborted it after the transaction timeout. When
			// the cut broker is A's transaction coordinator, the cut may
			// have come before the transaction added its first partition
			// there: the coordinator knows of no transaction to time out,
			// and A's hung commit goes through once the broker answers.
			if cutsTxnCoordinator {
				for a.metric("dedup_transactions_aborted_total") <= abortedA && a.metric("dedup_transactions_committed_total") <= committedA {
					if time.Since(healed) > 90*time.Second {
						t.Fatalf("A's transaction neither aborted nor committed within 90 s of the heal\n%s", tail(a.logs.String(), 40))
					}
					time.Sleep(100 * time.Millisecond) // polling a condition on another process
				}
			} else {
				a.waitMetric("dedup_transactions_aborted_total", 90*time.Second, func(v float64) bool { return v > abortedA })
			}
			outcome := "aborted"
			if a.metric("dedup_transactions_aborted_total") <= abortedA {
				outcome = "committed after the heal"
			}
			s1 := <-first
			if s1.err != nil {
				t.Fatal(s1.err)
			}
			e.waitProcessed(group)
			processedA = a.metric("dedup_events_processed_total")
			s2, err := e.stream("pp2", 300, 10*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			a.waitMetric("dedup_events_processed_total", 90*time.Second, func(v float64) bool { return v > processedA })
			fenced := a.metric("dedup_fencings_total")
			a.term()
			e.waitProcessed(group)
			b.term()
			e.exactlyOnce(append(s1.recs, s2...))
			stalls := regexp.MustCompile(`commit stalled.*?step="[^"]*"`).FindAllString(a.logs.String(), -1)
			// sarama has no text for PRODUCER_FENCED; the worker adds it.
			for _, l := range strings.Split(a.logs.String(), "\n") {
				if strings.Contains(l, "how did this happen") && !strings.Contains(l, "PRODUCER_FENCED") {
					t.Errorf("A logged an error without a name: %s", l)
				}
			}
			t.Logf("A reported %d commit stalls (last: %s), its transaction %s, fenced %v time(s), processing again; %d events exactly once",
				len(stalls), last(stalls), outcome, fenced, len(s1.recs)+len(s2))
		})
	}
}

// roles says what the broker advertised at listen is to A: its group
// coordinator, its transaction coordinator (the transactional ID is the
// member name A logs), the leader of how many output partitions. Asked
// through the proxies, whose addresses the brokers advertise.
func roles(proxies []string, listen, group, output, logs string) (desc string, txnCoordinator bool) {
	c, err := sarama.NewClient(proxies, kafkatest.Config())
	if err != nil {
		return "roles unknown: " + err.Error(), false
	}
	defer c.Close()
	node := int32(-1)
	for _, b := range c.Brokers() {
		if b.Addr() == listen {
			node = b.ID()
		}
	}
	var out []string
	if co, err := c.Coordinator(group); err == nil && co.ID() == node {
		out = append(out, "group coordinator")
	}
	if m := regexp.MustCompile(`member=(\S+)`).FindStringSubmatch(logs); m != nil {
		if co, err := c.TransactionCoordinator(m[1]); err == nil && co.ID() == node {
			out = append(out, "A's transaction coordinator")
			txnCoordinator = true
		}
	}
	leads, parts := 0, 0
	if ps, err := c.Partitions(output); err == nil {
		parts = len(ps)
		for _, p := range ps {
			if l, err := c.Leader(output, p); err == nil && l.ID() == node {
				leads++
			}
		}
	}
	out = append(out, fmt.Sprintf("leader of %d of %d output partitions", leads, parts))
	return fmt.Sprintf("node %d, %s", node, strings.Join(out, ", ")), txnCoordinator
}

func last(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return s[len(s)-1]
}
