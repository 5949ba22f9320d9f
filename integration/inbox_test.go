package integration

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/internal/pgtest"
)

// The ledger example (examples/ledger) debits accounts in PostgreSQL
// through the inbox and writes a settlement per debit. These tests run it
// as a process (integration/inboxworker, the example with fault points)
// against a real broker and a real PostgreSQL, and check that every event
// changed its account once, left one debit row and one settlement,
// whatever killed or paused the worker.

// inboxDatabase is a database of the test's own on the test server,
// dropped when the test passes; it returns its connection string.
func inboxDatabase(t *testing.T) (string, *sql.DB) {
	t.Helper()
	dsn := pgtest.DSN(t)
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.ReplaceAll(unique("inbox"), "-", "_")
	if _, err := admin.ExecContext(t.Context(), "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Close()
		if !t.Failed() {
			admin.ExecContext(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)")
		} else {
			t.Logf("keeping database %s for inspection", name)
		}
		admin.Close()
	})
	return u.String(), db
}

// buildInboxWorker builds integration/inboxworker.
func buildInboxWorker(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "inboxworker")
	if out, err := exec.Command("go", "build", "-o", bin, "./inboxworker").CombinedOutput(); err != nil {
		t.Fatalf("go build ./inboxworker: %v\n%s", err, out)
	}
	return bin
}

// payment is one event of the ledger's input.
type payment struct {
	id, account string
	amount      int64
}

func (p payment) record() kafkatest.Record {
	return kafkatest.Record{Key: p.account, Value: fmt.Appendf(nil,
		`{"eventId":%q,"type":"PaymentRequested","payload":{"account":%q,"amount":%d}}`, p.id, p.account, p.amount)}
}

// payments are n distinct payments over accounts accounts, cut into
// chunks, each chunk's records with about a fifth more: copies of events of
// this chunk or an earlier one, as a producer's retries and re-publishes.
func payments(seed uint64, n, accounts, chunks int) (distinct []payment, recs [][]kafkatest.Record) {
	r := rand.New(rand.NewPCG(seed, 0))
	for i := range n {
		distinct = append(distinct, payment{id: fmt.Sprintf("pay-%d-%d", seed, i),
			account: fmt.Sprintf("acct-%02d", r.IntN(accounts)), amount: 1 + r.Int64N(100)})
	}
	per := (n + chunks - 1) / chunks
	for c := range chunks {
		lo, hi := c*per, min((c+1)*per, n)
		var chunk []kafkatest.Record
		for _, p := range distinct[lo:hi] {
			chunk = append(chunk, p.record())
		}
		for range (hi - lo) / 5 {
			chunk = append(chunk, distinct[r.IntN(hi)].record())
		}
		r.Shuffle(len(chunk), func(i, j int) { chunk[i], chunk[j] = chunk[j], chunk[i] })
		recs = append(recs, chunk)
	}
	return distinct, recs
}

// checkLedger requires the database and the output topic to hold each
// distinct payment's effect exactly once.
func checkLedger(t *testing.T, ctx context.Context, db *sql.DB, brokers []string, output string, distinct []payment) {
	t.Helper()
	want := map[string]int64{}
	for _, p := range distinct {
		want[p.account] -= p.amount
	}
	rows, err := db.QueryContext(ctx, "SELECT id, balance FROM accounts")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for rows.Next() {
		var id string
		var balance int64
		if err := rows.Scan(&id, &balance); err != nil {
			t.Fatal(err)
		}
		got[id] = balance
	}
	rows.Close()
	for account, balance := range want {
		if got[account] != balance {
			t.Errorf("account %s: balance %d, want %d", account, got[account], balance)
		}
	}
	var debits, debited int
	if err := db.QueryRowContext(ctx, "SELECT count(*), count(DISTINCT event_id) FROM debits").Scan(&debits, &debited); err != nil {
		t.Fatal(err)
	}
	if debits != len(distinct) || debited != len(distinct) {
		t.Errorf("%d debit rows of %d events, want one row for each of %d", debits, debited, len(distinct))
	}
	out, err := kafkatest.ReadAll(ctx, brokers, output)
	if err != nil {
		t.Fatal(err)
	}
	settled := map[string]int{}
	for _, r := range out {
		var s struct{ EventID string }
		if err := json.Unmarshal(r.Value, &s); err != nil {
			t.Fatalf("settlement %q: %v", r.Value, err)
		}
		settled[s.EventID]++
	}
	missing, doubled := 0, 0
	for _, p := range distinct {
		switch settled[p.id] {
		case 0:
			missing++
		case 1:
		default:
			doubled++
		}
	}
	if missing != 0 || doubled != 0 || len(out) != len(distinct) {
		t.Errorf("%d settlements (read_committed) for %d events: %d missing, %d twice", len(out), len(distinct), missing, doubled)
	}
}

// inboxCounts sums the inbox counters the worker's incarnations left in
// their state dirs.
func inboxCounts(t *testing.T, dirs ...string) map[string]float64 {
	t.Helper()
	sum := map[string]float64{}
	for _, dir := range dirs {
		files, _ := filepath.Glob(filepath.Join(dir, "inbox-counts-*"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				name, v, ok := strings.Cut(line, " ")
				if !ok {
					continue
				}
				n, _ := strconv.ParseFloat(v, 64)
				sum[name] += n
			}
		}
	}
	return sum
}

// TestInboxSurvivesSIGKILLs: the ledger worker is SIGKILLed 20 times while
// payments arrive: a third of the kills at random points of its processing,
// a third in the window between the database commit and the Kafka commit,
// and a third right after the Kafka commit (where a database committed
// after Kafka would lose its work). Every payment still debits its account
// once and yields one settlement.
func TestInboxSurvivesSIGKILLs(t *testing.T) {
	const kills = 20
	e := newEnv(t, 6)
	group := e.group("ledger")
	dsn, db := inboxDatabase(t)
	bin := buildInboxWorker(t)
	distinct, chunks := payments(1, 21000, 50, kills+1)
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	state := t.TempDir()
	args := []string{"--brokers", strings.Join(e.brokers, ","), "--group", group, "--input", e.input, "--output", e.output,
		"--state-dir", state, "--instance-id", "ledger-0"}
	s := exampleKills{brokers: e.brokers, group: group, input: e.input}
	r := rand.New(rand.NewPCG(2, 0))
	for i, chunk := range chunks {
		produceBatch(t, e.brokers, e.input, chunk)
		ends, err := kafkatest.EndOffsets(e.brokers, e.input)
		if err != nil {
			t.Fatal(err)
		}
		env := []string{"INBOXWORKER_DSN=" + dsn}
		selfKill := i < kills && i%3 != 0
		switch {
		case selfKill && i%3 == 1:
			env = append(env, fmt.Sprintf("INBOXWORKER_KILL_AT_COMMIT=%d", 2+r.IntN(3)))
		case selfKill:
			env = append(env, fmt.Sprintf("INBOXWORKER_KILL_AFTER_COMMIT=%d", 2+r.IntN(3)))
		}
		p := startExampleEnv(t, bin, env, args...)
		switch {
		case i == kills:
			for _, topic := range []string{e.input, group + "-loop"} {
				if err := kafkatest.WaitCommitted(ctx, e.brokers, group, topic); err != nil {
					t.Fatalf("%v\n%s", err, tail(p.logs.String(), 40))
				}
			}
			p.term(t)
		case selfKill:
			select {
			case err := <-p.exited:
				p.exited <- err
				if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
					t.Fatalf("start %d: the worker exited with %v, want its own SIGKILL at the fault point\n%s", i+1, err, tail(p.logs.String(), 40))
				}
			case <-ctx.Done():
				t.Fatalf("start %d: the worker never reached its fault point\n%s", i+1, tail(p.logs.String(), 40))
			}
			if i%3 == 1 {
				t.Logf("start %d: killed itself between the database commit and the Kafka commit", i+1)
			} else {
				t.Logf("start %d: killed itself right after the Kafka commit", i+1)
			}
		default:
			at := s.awaitPartlyCommitted(t, ctx, p, s.committed(t, ends), ends)
			// A little further in: the kill lands in a transaction's
			// processing or its commit, wherever that is.
			time.Sleep(time.Duration(r.IntN(300)) * time.Millisecond)
			p.kill()
			t.Logf("start %d: SIGKILLed with the input committed to %v of %v", i+1, at, ends)
		}
	}
	checkLedger(t, ctx, db, e.brokers, e.output, distinct)
	counts := inboxCounts(t, state)
	t.Logf("inbox over all starts: %v first processed, %v answered from the inbox, %v conflicts",
		counts["dedup_inbox_first_processed_total"], counts["dedup_inbox_held_total"], counts["dedup_inbox_conflicts_total"])
	if counts["dedup_inbox_held_total"]+counts["dedup_inbox_conflicts_total"] == 0 {
		t.Error("no event was answered from the inbox: no kill hit the window between the two commits")
	}
}

// TestInboxZombie: a worker stops (SIGSTOP) inside its database
// transaction, past the group session timeout; a second instance takes its
// partitions and meets its locked rows; then the first resumes. No event
// is applied twice, none is lost.
func TestInboxZombie(t *testing.T) {
	e := newEnv(t, 4)
	group := e.group("ledger")
	dsn, db := inboxDatabase(t)
	bin := buildInboxWorker(t)
	distinct, chunks := payments(3, 4000, 20, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	base := []string{"--brokers", strings.Join(e.brokers, ","), "--group", group, "--input", e.input, "--output", e.output}
	stateA, stateB := t.TempDir(), t.TempDir()
	pause := filepath.Join(stateA, "pause")
	env := []string{"INBOXWORKER_DSN=" + dsn, "INBOXWORKER_SESSION_TIMEOUT=6s"}

	produceBatch(t, e.brokers, e.input, chunks[0])
	ends, err := kafkatest.EndOffsets(e.brokers, e.input)
	if err != nil {
		t.Fatal(err)
	}
	s := exampleKills{brokers: e.brokers, group: group, input: e.input}
	a := startExampleEnv(t, bin, append(env, "INBOXWORKER_PAUSE_FILE="+pause),
		append(base, "--state-dir", stateA, "--instance-id", "a")...)
	s.awaitPartlyCommitted(t, ctx, a, s.committed(t, ends), ends)
	if err := os.WriteFile(pause, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	until(t, time.Minute, "the first instance to stop inside its transaction", func() bool {
		_, err := os.Stat(pause + ".paused")
		return err == nil
	})
	defer a.cmd.Process.Signal(syscall.SIGCONT) // so that the cleanup's kill ends it

	produceBatch(t, e.brokers, e.input, chunks[1])
	b := startExampleEnv(t, bin, env, append(base, "--state-dir", stateB, "--instance-id", "b")...)
	until(t, time.Minute, "the second instance to wait for the first one's locked rows", func() bool {
		var waiting int
		db.QueryRowContext(ctx, "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "+
			"WHERE NOT l.granted AND d.datname = current_database()").Scan(&waiting)
		return waiting > 0
	})
	t.Log("the second instance waits for the stopped one's rows; resuming the stopped one")
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{e.input, group + "-loop"} {
		if err := kafkatest.WaitCommitted(ctx, e.brokers, group, topic); err != nil {
			t.Fatalf("%v\nA:\n%s\nB:\n%s", err, tail(a.logs.String(), 30), tail(b.logs.String(), 30))
		}
	}
	a.term(t)
	b.term(t)
	checkLedger(t, ctx, db, e.brokers, e.output, distinct)
	ca, cb := inboxCounts(t, stateA), inboxCounts(t, stateB)
	t.Logf("inbox: first instance %v first processed, %v conflicts; second %v first processed, %v answered from the inbox, %v conflicts",
		ca["dedup_inbox_first_processed_total"], ca["dedup_inbox_conflicts_total"],
		cb["dedup_inbox_first_processed_total"], cb["dedup_inbox_held_total"], cb["dedup_inbox_conflicts_total"])
}
