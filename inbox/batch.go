package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dedupkit/dedup"
)

// batch is one of a runtime member's database transactions (lanes.go):
// the events of its lane since its last commit, which may span the end of
// one Kafka transaction and the start of the next (a commit runs while the
// member goes on processing). The member commits it just before each Kafka
// commit: everything an event did before its Kafka transaction was sealed
// is then in a committed database transaction, this one or an earlier one.
type batch struct {
	ib *Inbox
	// mu lets one event at a time work in tx, and makes Commit and
	// Rollback wait for it.
	mu        sync.Mutex
	tx        *sql.Tx // nil until the first event after a commit
	savepoint bool    // an event's savepoint is set, to release before the next
	// keys and outputs are the first-processed events' dedup keys and
	// encoded messages, written to their rows just before the commit.
	keys    []string
	outputs [][]byte
	// broken is why tx cannot commit: every event after it, and the
	// commit, fail so that the Kafka transaction aborts.
	broken error
}

// The per-event savepoint. Releasing the previous one in the same round
// trip as setting the next keeps the per-event statements to two besides
// the handler's own: this and the claim.
const (
	setSavepoint    = "SAVEPOINT dedup_inbox_event"
	nextSavepoint   = "RELEASE SAVEPOINT dedup_inbox_event; SAVEPOINT dedup_inbox_event"
	rollbackToEvent = "ROLLBACK TO SAVEPOINT dedup_inbox_event"
)

// handle runs fn for ev in the member's transaction, or answers ev from
// the inbox when an earlier attempt committed it.
func (b *batch) handle(ctx context.Context, ev *dedup.Event, fn Func) (msgs []dedup.Message, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.begin(ctx); err != nil {
		return nil, err
	}
	undo := true // until the event's work is kept or answered
	defer func() {
		if undo {
			// A panic, too: the engine recovers it and dead-letters the
			// event, whose claim and work must not commit.
			b.rollbackEvent(ctx)
		}
	}()
	ib := b.ib
	var first, held bool
	var stored []byte
	if err := b.tx.QueryRowContext(ctx, ib.sql.claim, ib.cfg.Group, ev.EventID, ev.Topic, ev.Partition, ev.Offset).
		Scan(&first, &held, &stored); err != nil {
		return nil, fmt.Errorf("inbox: claim event %s: %w", ev.EventID, err)
	}
	switch {
	case first:
		msgs, err := fn(ctx, &Tx{tx: b.tx}, ev)
		if err != nil {
			return nil, err
		}
		undo = false
		b.keys = append(b.keys, ev.EventID)
		b.outputs = append(b.outputs, encodeMessages(msgs))
		ib.metrics.first.Inc()
		return msgs, nil
	case held:
		ib.metrics.held.Inc()
	default:
		// Another transaction committed the event's row while the claim
		// waited for it: a zombie's, or a member's before a rebalance.
		ib.metrics.conflicts.Inc()
		if err := b.tx.QueryRowContext(ctx, ib.sql.held, ib.cfg.Group, ev.EventID).Scan(&stored); err != nil {
			return nil, fmt.Errorf("inbox: read event %s after a concurrent attempt committed it: %w", ev.EventID, err)
		}
	}
	undo = false
	if stored == nil {
		return nil, fmt.Errorf("inbox: event %s: its row has no messages", ev.EventID)
	}
	msgs, err = decodeMessages(stored)
	if err != nil {
		return nil, fmt.Errorf("inbox: event %s: %w", ev.EventID, err)
	}
	return msgs, nil
}

// begin opens the transaction when none is, and sets the event's
// savepoint. A failure leaves nothing that can commit: the error wraps
// dedup.ErrInterrupted, so the runtime aborts its Kafka transaction and the
// event comes again, rather than dead-lettering events while the database
// is away.
func (b *batch) begin(ctx context.Context) error {
	if b.broken != nil {
		return fmt.Errorf("%w: inbox: the transaction failed earlier: %w", dedup.ErrInterrupted, b.broken)
	}
	if b.tx == nil {
		// The transaction outlives the handler's context; the runtime
		// ends it (Commit, Rollback).
		tx, err := b.ib.db.BeginTx(context.Background(), &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return fmt.Errorf("%w: inbox: begin: %w", dedup.ErrInterrupted, err)
		}
		b.tx, b.savepoint = tx, false
	}
	stmt := setSavepoint
	if b.savepoint {
		stmt = nextSavepoint
	}
	if _, err := b.tx.ExecContext(ctx, stmt); err != nil {
		b.broken = err
		return fmt.Errorf("%w: inbox: savepoint: %w", dedup.ErrInterrupted, err)
	}
	b.savepoint = true
	return nil
}

// rollbackEvent undoes the event's claim and work. When even that fails
// the transaction is broken.
func (b *batch) rollbackEvent(ctx context.Context) {
	if _, err := b.tx.ExecContext(context.WithoutCancel(ctx), rollbackToEvent); err != nil {
		b.broken = errors.Join(fmt.Errorf("roll back to the event's savepoint: %w", err), ctx.Err())
	}
}

// Commit writes the first-processed events' messages to their rows and
// commits; it waits for the event at work.
func (b *batch) Commit(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	tx := b.tx
	if tx == nil && b.broken == nil {
		return nil
	}
	defer b.reset()
	if b.broken != nil {
		if tx != nil {
			tx.Rollback()
		}
		return fmt.Errorf("inbox: %w", b.broken)
	}
	start := time.Now()
	if len(b.keys) > 0 {
		if _, err := tx.ExecContext(ctx, b.ib.sql.outputs, b.ib.cfg.Group, b.keys, b.outputs); err != nil {
			tx.Rollback()
			return fmt.Errorf("inbox: store the events' messages: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("inbox: commit: %w", err)
	}
	b.ib.metrics.commit.Observe(time.Since(start).Seconds())
	return nil
}

// Rollback drops the transaction; it waits for the event at work.
func (b *batch) Rollback() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tx != nil {
		b.tx.Rollback()
	}
	b.reset()
}

func (b *batch) reset() {
	b.tx, b.savepoint, b.broken = nil, false, nil
	clear(b.keys)
	clear(b.outputs)
	b.keys, b.outputs = b.keys[:0], b.outputs[:0]
}
