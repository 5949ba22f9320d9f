package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dedupkit/dedup/examples/payments/charge"
	"github.com/dedupkit/dedup/internal/kafkatest"
)

// paymentPhases are n phases of PaymentRequested events, per phase perAccount
// requests of each of accounts, keyed by account, seq numbers going on
// from phase to phase; and every event ID.
func paymentPhases(n, accounts, perAccount int) ([][]kafkatest.Record, []string) {
	var phases [][]kafkatest.Record
	var ids []string
	for ph := range n {
		var recs []kafkatest.Record
		for s := 1; s <= perAccount; s++ {
			seq := ph*perAccount + s
			for a := 1; a <= accounts; a++ {
				acct, id := fmt.Sprintf("acct-%d", a), fmt.Sprintf("pay-%d-%d", a, seq)
				recs = append(recs, kafkatest.Record{Key: acct, Value: fmt.Appendf(nil,
					`{"eventId":%q,"type":"PaymentRequested","payload":{"account":%q,"seq":%d,"amount":1}}`, id, acct, seq)})
				ids = append(ids, id)
			}
		}
		phases = append(phases, recs)
	}
	return phases, ids
}

// checkPayments requires every request charged once in the results, each
// account's in seq order, and no dead letter.
func checkPayments(t *testing.T, e *env, group string, ids []string) {
	t.Helper()
	results := e.read(e.output)
	last := map[string]int{}
	exactlyOnce(t, e.output, countBy(t, e.output, results, func(r kafkatest.Record) (string, error) {
		var res charge.Result
		if err := json.Unmarshal(r.Value, &res); err != nil {
			return "", err
		}
		if res.Seq <= last[res.Account] {
			t.Errorf("%s: seq %d of %s committed after seq %d (p%d@%d)", e.output, res.Seq, res.Account, last[res.Account], r.Partition, r.Offset)
		}
		last[res.Account] = res.Seq
		return res.EventID, nil
	}), ids)
	dlq := e.read(group + "-dlq")
	if len(dlq) > 0 {
		t.Errorf("%d dead letters, want none; the first: %s %v", len(dlq), dlq[0].Value, dlq[0].Headers)
	}
}

// The payments example (many slow calls in flight, one at a time per
// account) SIGKILLed ten times while it charges, restarted each time on the
// same state dir: every request is charged once, each account's in order,
// and nothing is dead-lettered. The events a killed instance had finished
// past its committed offset are skipped by the table after the restart.
func TestPaymentsSurviveKillsWithCallsInFlight(t *testing.T) {
	e := newEnv(t, 6)
	group := e.group("payments-kill")
	dropTopics(t, e.brokers, e.output)
	phases, ids := paymentPhases(11, 40, 20)
	exampleKills{
		bin: buildExample(t, "payments"), brokers: e.brokers, group: group, input: e.input, phases: phases,
		args: []string{"--group", group, "--input", e.input, "--output", e.output,
			"--provider-latency", "50ms", "--concurrency", "1000"},
		progress: e.output,
	}.run(t)
	checkPayments(t, e, group, ids)
}

// Two instances of the payments example restarted one after the other,
// five times (SIGTERM, as a rolling update does), while they charge: the
// interrupted calls are neither charged twice nor dead-lettered.
func TestPaymentsSurviveARollingRestart(t *testing.T) {
	e := newEnv(t, 6)
	group := e.group("payments-roll")
	dropTopics(t, e.brokers, e.output)
	phases, ids := paymentPhases(1, 40, 150)
	bin := buildExample(t, "payments")
	args := func(name, state string) []string {
		return []string{"--group", group, "--input", e.input, "--output", e.output, "--provider-latency", "50ms",
			"--concurrency", "1000", "--brokers", strings.Join(e.brokers, ","), "--state-dir", state, "--instance-id", name}
	}
	states := []string{t.TempDir(), t.TempDir()}
	procs := []*exampleProc{startExample(t, bin, args("pay-a", states[0])...), startExample(t, bin, args("pay-b", states[1])...)}
	produceBatch(t, e.brokers, e.input, phases[0])
	ends, err := kafkatest.EndOffsets(e.brokers, e.input)
	if err != nil {
		t.Fatal(err)
	}
	s := exampleKills{brokers: e.brokers, group: group, input: e.input}
	before := s.committed(t, ends)
	for i := range 5 {
		n := i % 2
		// Restart while the group is charging: once it committed more
		// since the last restart, and not everything.
		before = s.awaitPartlyCommitted(t, t.Context(), procs[n], before, ends)
		procs[n].term(t)
		procs[n] = startExample(t, bin, args([]string{"pay-a", "pay-b"}[n], states[n])...)
		t.Logf("restart %d of instance %d with the input committed to %v", i+1, n, before)
	}
	if err := e.processedWithin(group, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		p.term(t)
	}
	checkPayments(t, e, group, ids)
}
