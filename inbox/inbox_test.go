package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/inbox"
	"github.com/dedupkit/dedup/internal/pgtest"
	"github.com/dedupkit/dedup/internal/resources"
)

// fixture is an inbox on a table of the test's own, with a ledger table the
// handler writes, and a member's resource set to run events in.
type fixture struct {
	t      testing.TB
	db     *sql.DB
	ib     *inbox.Inbox
	reg    *prometheus.Registry
	ledger string
	calls  sync.Map // event ID -> times the handler's work ran
}

func newFixture(t *testing.T) *fixture { return newBenchFixture(t) }

func newBenchFixture(t testing.TB) *fixture {
	t.Helper()
	db, err := sql.Open("pgx", pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	name := "t_" + strings.ToLower(strings.NewReplacer("/", "_", "-", "_").Replace(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	f := &fixture{t: t, db: db, reg: prometheus.NewRegistry(), ledger: name + "_ledger"}
	f.ib, err = inbox.New(db, inbox.Config{Group: "g", Table: name + "_inbox", Registerer: f.reg, SweepBatch: 3})
	if err != nil {
		t.Fatal(err)
	}
	f.exec("DROP TABLE IF EXISTS " + name + "_inbox, " + f.ledger)
	if err := f.ib.CreateTable(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.exec("CREATE TABLE " + f.ledger + " (event_id text PRIMARY KEY, amount int NOT NULL)")
	return f
}

func (f *fixture) exec(q string, args ...any) {
	f.t.Helper()
	if _, err := f.db.ExecContext(context.Background(), q, args...); err != nil {
		f.t.Fatalf("%s: %v", q, err)
	}
}

func (f *fixture) count(q string, args ...any) int {
	f.t.Helper()
	var n int
	if err := f.db.QueryRowContext(context.Background(), q, args...).Scan(&n); err != nil {
		f.t.Fatalf("%s: %v", q, err)
	}
	return n
}

// handler writes the event to the ledger and returns one message; fail
// makes it fail after its write, for the events it names.
func (f *fixture) handler(fail func(id string) error) dedup.Handler {
	return f.ib.Handler(func(ctx context.Context, tx *inbox.Tx, ev *dedup.Event) ([]dedup.Message, error) {
		n, _ := f.calls.LoadOrStore(ev.EventID, new(int))
		*n.(*int)++
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+f.ledger+" VALUES ($1, $2)", ev.EventID, len(ev.EventID)); err != nil {
			return nil, err
		}
		if fail != nil {
			if err := fail(ev.EventID); err != nil {
				return nil, err
			}
		}
		return []dedup.Message{{Key: ev.EventID, Value: []byte("settled " + ev.EventID),
			Headers: dedup.Headers{{Key: "by", Value: []byte("inbox")}}}}, nil
	})
}

func (f *fixture) ran(id string) int {
	n, ok := f.calls.Load(id)
	if !ok {
		return 0
	}
	return *n.(*int)
}

// member is one runtime member's resources, as the processor gives them.
type member struct {
	set *resources.Set
	ctx context.Context
}

func newMember(t *testing.T) *member { return newBenchMember(t) }

func newBenchMember(t testing.TB) *member {
	s := resources.New()
	return &member{set: s, ctx: resources.With(t.Context(), s)}
}

func event(id string) *dedup.Event {
	return &dedup.Event{Position: dedup.Position{Topic: "payments", Partition: 3, Offset: 42}, EventID: id}
}

func (f *fixture) metric(name string) float64 {
	f.t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	f.t.Fatalf("no metric %s", name)
	return 0
}

func TestFirstThenHeld(t *testing.T) {
	f := newFixture(t)
	h := f.handler(nil)
	a := newMember(t)
	first, err := h.Handle(a.ctx, event("e1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.set.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The Kafka transaction aborted after the database committed: the
	// event comes again, to this member or another.
	b := newMember(t)
	again, err := h.Handle(b.ctx, event("e1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.set.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(again) != fmt.Sprint(first) {
		t.Fatalf("the retried event returned %v, the first attempt %v", again, first)
	}
	if n := f.ran("e1"); n != 1 {
		t.Fatalf("the handler's work ran %d times, want 1", n)
	}
	if n := f.count("SELECT count(*) FROM " + f.ledger); n != 1 {
		t.Fatalf("%d ledger rows, want 1", n)
	}
	if got := f.metric("dedup_inbox_first_processed_total"); got != 1 {
		t.Errorf("first processed %v, want 1", got)
	}
	if got := f.metric("dedup_inbox_held_total"); got != 1 {
		t.Errorf("held %v, want 1", got)
	}
	if n := testutil.CollectAndCount(f.reg, "dedup_inbox_commit_seconds"); n != 1 {
		t.Errorf("%d commit duration series, want 1", n)
	}
}

// TestConcurrentAttempts: two members claim one event at once (a zombie and
// the new owner). The second waits on the first's row; once the first
// commits it gets the stored messages and never runs the work.
func TestConcurrentAttempts(t *testing.T) {
	f := newFixture(t)
	h := f.handler(nil)
	a, b := newMember(t), newMember(t)
	first, err := h.Handle(a.ctx, event("e1"))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		msgs []dedup.Message
		err  error
	}
	second := make(chan result, 1)
	go func() {
		msgs, err := h.Handle(b.ctx, event("e1"))
		second <- result{msgs, err}
	}()
	// b's claim waits for a's open transaction: it is one of a's locks'
	// waiters in pg_locks before a commits.
	waitFor(t, "the second attempt to wait for the first's row", func() bool {
		return f.count("SELECT count(*) FROM pg_locks WHERE NOT granted") > 0
	})
	if err := a.set.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := <-second
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := b.set.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(r.msgs) != fmt.Sprint(first) || f.ran("e1") != 1 {
		t.Fatalf("second attempt returned %v (first %v), work ran %d times", r.msgs, first, f.ran("e1"))
	}
	if got := f.metric("dedup_inbox_conflicts_total"); got != 1 {
		t.Errorf("conflicts %v, want 1", got)
	}
}

// TestFirstAttemptRolledBack: when the first attempt's transaction rolls
// back (its member died), the waiting attempt applies the event itself.
func TestFirstAttemptRolledBack(t *testing.T) {
	f := newFixture(t)
	h := f.handler(nil)
	a, b := newMember(t), newMember(t)
	if _, err := h.Handle(a.ctx, event("e1")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := h.Handle(b.ctx, event("e1"))
		done <- err
	}()
	waitFor(t, "the second attempt to wait for the first's row", func() bool {
		return f.count("SELECT count(*) FROM pg_locks WHERE NOT granted") > 0
	})
	a.set.Rollback()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := b.set.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := f.count("SELECT count(*) FROM " + f.ledger); n != 1 || f.ran("e1") != 2 {
		t.Fatalf("%d ledger rows, work ran %d times; want 1 row from 2 runs", n, f.ran("e1"))
	}
}

// TestAFailingEventUndoesOnlyItself: one database transaction holds many
// events, each behind its savepoint.
func TestAFailingEventUndoesOnlyItself(t *testing.T) {
	f := newFixture(t)
	boom := errors.New("payment refused")
	h := f.handler(func(id string) error {
		if id == "e2" {
			return boom
		}
		if id == "e4" {
			panic("handler bug")
		}
		return nil
	})
	m := newMember(t)
	for _, id := range []string{"e1", "e2", "e3", "e4", "e5"} {
		func() {
			defer func() { recover() }() // the engine turns a panic into a dead letter
			_, err := h.Handle(m.ctx, event(id))
			if (id == "e2") != errors.Is(err, boom) {
				t.Errorf("%s: err %v", id, err)
			}
		}()
	}
	if err := m.set.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	var got []string
	rows, err := f.db.QueryContext(t.Context(), "SELECT event_id FROM "+f.ledger+" ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		rows.Scan(&id)
		got = append(got, id)
	}
	if fmt.Sprint(got) != "[e1 e3 e5]" {
		t.Fatalf("ledger holds %v, want [e1 e3 e5]", got)
	}
	if n := f.count("SELECT count(*) FROM " + f.ledger[:len(f.ledger)-len("_ledger")] + "_inbox WHERE messages IS NOT NULL"); n != 3 {
		t.Fatalf("%d inbox rows with messages, want 3", n)
	}
}

func TestRollbackDropsTheBatch(t *testing.T) {
	f := newFixture(t)
	h := f.handler(nil)
	m := newMember(t)
	if _, err := h.Handle(m.ctx, event("e1")); err != nil {
		t.Fatal(err)
	}
	m.set.Rollback()
	if n := f.count("SELECT count(*) FROM " + f.ledger); n != 0 {
		t.Fatalf("%d ledger rows after the rollback", n)
	}
	if _, err := h.Handle(m.ctx, event("e1")); err != nil { // a new transaction
		t.Fatal(err)
	}
	if err := m.set.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := f.count("SELECT count(*) FROM " + f.ledger); n != 1 {
		t.Fatalf("%d ledger rows, want 1", n)
	}
}

// TestLostConnection: a transaction whose connection is gone cannot
// commit; the events after it ask the runtime to abort (ErrInterrupted)
// rather than be dead-lettered, and so does the commit.
func TestLostConnection(t *testing.T) {
	f := newFixture(t)
	var pid int
	h := f.ib.Handler(func(ctx context.Context, tx *inbox.Tx, ev *dedup.Event) ([]dedup.Message, error) {
		if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			return nil, err
		}
		return nil, nil
	})
	m := newMember(t)
	if _, err := h.Handle(m.ctx, event("e1")); err != nil {
		t.Fatal(err)
	}
	f.exec("SELECT pg_terminate_backend($1)", pid)
	_, err := h.Handle(m.ctx, event("e2"))
	if !errors.Is(err, dedup.ErrInterrupted) {
		t.Fatalf("an event after the connection was lost: err %v, want one wrapping dedup.ErrInterrupted", err)
	}
	if err := m.set.Commit(t.Context()); err == nil {
		t.Fatal("the commit of a transaction whose connection was lost succeeded")
	}
	if _, err := h.Handle(m.ctx, event("e1")); err != nil { // the events come again: a new transaction
		t.Fatal(err)
	}
	if err := m.set.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestSweep(t *testing.T) {
	f := newFixture(t)
	h := f.handler(nil)
	m := newMember(t)
	for i := range 8 {
		if _, err := h.Handle(m.ctx, event(fmt.Sprintf("e%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.set.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	table := f.ledger[:len(f.ledger)-len("_ledger")] + "_inbox"
	f.exec("UPDATE " + table + " SET processed_at = now() - interval '30 days' WHERE dedup_key < 'e5'")
	n, err := f.ib.Sweep(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if n != 5 || f.count("SELECT count(*) FROM "+table) != 3 {
		t.Fatalf("swept %d, %d left; want 5 swept (in batches of 3), 3 left", n, f.count("SELECT count(*) FROM "+table))
	}
	if got := f.metric("dedup_inbox_swept_total"); got != 5 {
		t.Errorf("swept metric %v, want 5", got)
	}
}

func TestOutsideTheRuntime(t *testing.T) {
	f := newFixture(t)
	_, err := f.handler(nil).Handle(t.Context(), event("e1"))
	if !errors.Is(err, dedup.ErrNoResources) {
		t.Fatalf("err %v, want dedup.ErrNoResources", err)
	}
}

func TestConfig(t *testing.T) {
	db, _ := sql.Open("pgx", "postgres://unused")
	for _, tc := range []struct {
		name string
		cfg  inbox.Config
		want string
	}{
		{"no group", inbox.Config{}, "Group is required"},
		{"table with a quote", inbox.Config{Group: "g", Table: `x"; DROP TABLE y`}, "want a lower-case name"},
		{"negative retention", inbox.Config{Group: "g", Retention: -time.Second}, "must not be negative"},
		{"schema-qualified", inbox.Config{Group: "g", Table: "app.dedup_inbox"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := inbox.New(db, tc.cfg)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Instances that start together create the table once, without failing.
func TestCreateTableConcurrently(t *testing.T) {
	f := newFixture(t)
	table := f.ledger[:len(f.ledger)-len("_ledger")] + "_inbox"
	f.exec("DROP TABLE " + table)
	errs := make(chan error, 8)
	for range 8 {
		go func() { errs <- f.ib.CreateTable(context.Background()) }()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := f.count("SELECT count(*) FROM " + table); n != 0 {
		t.Fatalf("%d rows in a new table", n)
	}
}
