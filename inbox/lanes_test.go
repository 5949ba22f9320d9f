package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/pgtest"
	"github.com/dedupkit/dedup/internal/resources"
)

// Two lanes of one member: an event in one lane waits for a row that the
// other lane's open transaction holds. The member's commit commits both
// lanes at once, so the first commit releases the row and the second
// follows; one after the other would wait forever.
func TestLanesCommitTogether(t *testing.T) {
	db, err := sql.Open("pgx", pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ib, err := New(db, Config{Group: "g", Table: "t_lanes_inbox", Lanes: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, q := range []string{"DROP TABLE IF EXISTS t_lanes_inbox, t_lanes_rows", "CREATE TABLE t_lanes_rows (id int PRIMARY KEY, n int)",
		"INSERT INTO t_lanes_rows VALUES (1, 0)"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := ib.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	set := resources.New()
	hctx := resources.With(ctx, set)
	h := ib.Handler(func(ctx context.Context, tx *Tx, ev *dedup.Event) ([]dedup.Message, error) {
		_, err := tx.ExecContext(ctx, "UPDATE t_lanes_rows SET n = n + 1 WHERE id = 1")
		return nil, err
	})
	// Two record keys in different lanes.
	r, err := set.Join(ib, func() (resources.Resource, error) { return ib.newLanes(), nil })
	if err != nil {
		t.Fatal(err)
	}
	l := r.(*lanes)
	keyA, keyB := "k0", ""
	for i := 1; keyB == ""; i++ {
		k := fmt.Sprintf("k%d", i)
		if l.of(&dedup.Event{Key: k}) != l.of(&dedup.Event{Key: keyA}) {
			keyB = k
		}
	}
	if _, err := h.Handle(hctx, &dedup.Event{EventID: "e1", Key: keyA}); err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() {
		_, err := h.Handle(hctx, &dedup.Event{EventID: "e2", Key: keyB})
		second <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); ; {
		var waiting int
		db.QueryRowContext(ctx, "SELECT count(*) FROM pg_locks WHERE NOT granted").Scan(&waiting)
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second lane's event never waited for the first lane's row")
		}
		time.Sleep(5 * time.Millisecond) // polling PostgreSQL's lock table
	}
	committed := make(chan error, 1)
	go func() {
		// The runtime commits after its calls returned; here the commit
		// starts while the second event waits, as it does when calls
		// straddle a commit.
		committed <- set.Commit(context.Background())
	}()
	select {
	case err := <-committed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the commit of two lanes, one waiting for the other, never ended")
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if err := set.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	db.QueryRowContext(ctx, "SELECT n FROM t_lanes_rows WHERE id = 1").Scan(&n)
	if n != 2 {
		t.Fatalf("row updated %d times, want 2", n)
	}
}
