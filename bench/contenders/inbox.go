package contenders

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx" driver, as inbox's users open it

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/inbox"
)

// InboxTable is the inbox table of the postgres-inbox contender: the
// package's default, in the same database as order_totals.
const InboxTable = "dedup_inbox"

// openInbox opens the database the postgres-inbox contender works in, as
// inbox's documentation does (database/sql with pgx's driver). members is
// the number of runtime members that will hold a transaction each.
func openInbox(dsn, group string, members int, reg prometheus.Registerer) (*sql.DB, *inbox.Inbox, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: %w", err)
	}
	// Every member keeps one connection busy with its transaction from its
	// first event to its commit; database/sql keeps two idle connections by
	// default, so with more members a connection would be closed and
	// reopened around each commit. Keep one per member, and a spare.
	db.SetMaxIdleConns(max(members, 1) + 1)
	ib, err := inbox.New(db, inbox.Config{Group: group, Table: InboxTable, Registerer: reg})
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, ib, nil
}

// inboxHandler is the postgres-inbox contender's handler: the business job
// of postgres-processed (the order_totals upsert of upsertOrder, once per
// first-seen event) in the inbox's transaction, forwarding the event as the
// worker's forward handler does. The worker's dedup table filters the input's
// duplicates before the handler; the inbox makes the upsert exactly-once with
// the Kafka outputs across crashes (an event whose database transaction
// committed but whose Kafka transaction aborted is answered from the inbox).
// It adds the time of each event's database work to st.
func inboxHandler(ib *inbox.Inbox, st *inboxTimes) dedup.Handler {
	forward := dedup.Forward()
	h := ib.Handler(func(ctx context.Context, tx *inbox.Tx, ev *dedup.Event) ([]dedup.Message, error) {
		order := ev.AggregateID
		if order == "" {
			return nil, dedup.Permanent(fmt.Errorf("event %s has no aggregate ID", ev.EventID))
		}
		start := time.Now()
		_, err := tx.ExecContext(ctx, upsertOrder, order, ev.EventID)
		st.upsert.Add(int64(time.Since(start)))
		if err != nil {
			return nil, fmt.Errorf("upsert order_totals: %w", err)
		}
		return forward.Handle(ctx, ev)
	})
	return dedup.HandlerFunc(func(ctx context.Context, ev *dedup.Event) ([]dedup.Message, error) {
		start := time.Now()
		msgs, err := h.Handle(ctx, ev)
		st.handle.Add(int64(time.Since(start)))
		st.events.Add(1)
		return msgs, err
	})
}

// inboxTimes adds up where the postgres-inbox contender's database time
// goes, over all members: the inbox's handler per event (its savepoint and
// claim statements and the upsert, with the wait for the member's
// transaction when it is committing) and the upsert alone. The database
// commits are the inbox's commit histogram, in reg.
type inboxTimes struct {
	events, handle, upsert atomic.Int64
	reg                    *prometheus.Registry
}

// InboxStats are a postgres-inbox process's totals, over all its members:
// the handler's calls and seconds in them (savepoint, claim, upsert), the
// upsert's seconds, and the database commits (the messages' update and
// COMMIT) with their seconds.
type InboxStats struct {
	Events                       int64
	HandleSeconds, UpsertSeconds float64
	Commits                      uint64
	CommitSeconds                float64
}

func (t *inboxTimes) stats() InboxStats {
	s := InboxStats{Events: t.events.Load(), HandleSeconds: time.Duration(t.handle.Load()).Seconds(),
		UpsertSeconds: time.Duration(t.upsert.Load()).Seconds()}
	mfs, _ := t.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "dedup_inbox_commit_seconds" && len(mf.GetMetric()) > 0 {
			h := mf.GetMetric()[0].GetHistogram()
			s.Commits, s.CommitSeconds = h.GetSampleCount(), h.GetSampleSum()
		}
	}
	return s
}

// InboxCheck is the postgres-inbox contender's database side after a run:
// the events order_totals counted (the sum of its events column) and the
// inbox rows of the group. Each must equal the number of distinct events.
type InboxCheck struct {
	OrderEvents int64
	InboxRows   int64
}

// CheckInbox reads the figures of InboxCheck for group.
func CheckInbox(ctx context.Context, dsn, group string) (InboxCheck, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return InboxCheck{}, fmt.Errorf("postgres: %w", err)
	}
	defer db.Close()
	var c InboxCheck
	err = errors.Join(
		db.QueryRowContext(ctx, `SELECT coalesce(sum(events), 0) FROM order_totals`).Scan(&c.OrderEvents),
		db.QueryRowContext(ctx, `SELECT count(*) FROM `+InboxTable+` WHERE consumer_group = $1`, group).Scan(&c.InboxRows))
	if err != nil {
		return InboxCheck{}, fmt.Errorf("postgres: %w", err)
	}
	return c, nil
}
