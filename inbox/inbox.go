// Package inbox gives a handler an exactly-once effect in a SQL database
// together with its exactly-once Kafka outputs: the processed_messages
// pattern, batched per Kafka transaction.
//
// A handler made by Inbox.Handler runs its database work in a transaction
// that also records the event in an inbox table (the consumer group, the
// dedup key, the source position, the time and the messages the handler
// returned). That database transaction spans the events of one of the
// runtime's Kafka transactions, with a savepoint per event so that a failing
// event undoes only its own work, and commits just before the Kafka commit
// (dedup.Resource). A crash between the two commits leaves the database
// committed and the Kafka transaction aborted; the events come again, and
// the inbox answers each with the messages it stored, without running the
// database work again. Two attempts at one event at once (a zombie instance
// and the partition's new owner) are serialised by the inbox's primary key:
// one applies, the other gets the stored messages.
//
//	ib, err := inbox.New(db, inbox.Config{Group: "settlement"})
//	top, err := dedup.Define("settlement", dedup.Input("payments"), dedup.Output("settlements"),
//		dedup.Handle(ib.Handler(func(ctx context.Context, tx *inbox.Tx, ev *dedup.Event) ([]dedup.Message, error) {
//			if _, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance - $1 WHERE id = $2`, amount, id); err != nil {
//				return nil, err
//			}
//			return []dedup.Message{{Key: id, Value: settlement}}, nil
//		})))
//
// It needs the exactly-once runtime (package processor), which commits the
// database transaction with its Kafka transactions. The SQL is
// PostgreSQL's; docs/library.md shows the table and what stays outside the
// guarantee.
package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupkit/dedup"
)

// Config configures an Inbox. Zero values take the defaults.
type Config struct {
	// Group is the consumer group whose events the inbox records: the
	// topology's. Required.
	Group string
	// Table is the inbox table (default "dedup_inbox"), optionally
	// schema-qualified; lower case letters, digits and underscores.
	Table string
	// Retention is how long a row is kept (default dedup.DefaultRetention);
	// give the topology's. A row is needed until its event's Kafka
	// transaction committed; the rest of the time it answers "was this
	// event processed, where and when".
	Retention time.Duration
	// Lanes is how many database transactions each runtime member keeps
	// (default 1): with dedup.Concurrency above one, that many of its
	// events do their database work side by side, each in the lane of its
	// record key. Each lane is a connection of db's pool.
	Lanes int
	// SweepInterval is how often Sweeper deletes expired rows (default
	// 1m), at most SweepBatch (default 1000) per statement.
	SweepInterval time.Duration
	SweepBatch    int
	// Registerer, when set, gets the inbox's Prometheus metrics.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Table == "" {
		c.Table = "dedup_inbox"
	}
	if c.Retention == 0 {
		c.Retention = dedup.DefaultRetention
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = time.Minute
	}
	if c.SweepBatch == 0 {
		c.SweepBatch = 1000
	}
	if c.Lanes == 0 {
		c.Lanes = 1
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports a configuration that cannot work (after defaults).
func (c *Config) Validate() error {
	var errs []error
	if c.Group == "" {
		errs = append(errs, errors.New("inbox: Group is required: the consumer group whose events it records"))
	}
	if !tableName.MatchString(c.Table) {
		errs = append(errs, fmt.Errorf("inbox: table %q: want a lower-case name (letters, digits, _), optionally schema-qualified", c.Table))
	}
	if c.Retention < 0 || c.SweepInterval < 0 || c.SweepBatch < 0 || c.Lanes < 0 {
		errs = append(errs, errors.New("inbox: retention, sweep and lanes must not be negative"))
	}
	return errors.Join(errs...)
}

// Inbox records the events a group's handlers applied to a database.
type Inbox struct {
	db      *sql.DB
	cfg     Config
	sql     statements
	metrics *metrics
}

// New returns an Inbox on db. It does not touch the database: CreateTable
// creates the table on request.
func New(db *sql.DB, cfg Config) (*Inbox, error) {
	if db == nil {
		return nil, errors.New("inbox: no database")
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer, cfg.Group)
	if err != nil {
		return nil, err
	}
	return &Inbox{db: db, cfg: cfg, sql: newStatements(cfg.Table), metrics: m}, nil
}

// DDL is the inbox table's definition, for a migration of your own.
func (ib *Inbox) DDL() string { return ib.sql.ddl }

// CreateTable creates the inbox table and its index when missing. Instances
// that start together take turns: PostgreSQL's CREATE TABLE IF NOT EXISTS
// fails, rather than waits, when another session creates the same table at
// that moment.
func (ib *Inbox) CreateTable(ctx context.Context) error {
	tx, err := ib.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("inbox: create table %s: %w", ib.cfg.Table, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "dedup_inbox "+ib.cfg.Table); err != nil {
		return fmt.Errorf("inbox: create table %s: %w", ib.cfg.Table, err)
	}
	if _, err := tx.ExecContext(ctx, ib.sql.ddl); err != nil {
		return fmt.Errorf("inbox: create table %s: %w", ib.cfg.Table, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("inbox: create table %s: %w", ib.cfg.Table, err)
	}
	return nil
}

// Func is a handler whose database work goes through tx. It returns the
// event's messages as a dedup.Handler does; an error undoes its database
// work (and only its own) and is then the handler's error.
type Func func(ctx context.Context, tx *Tx, ev *dedup.Event) ([]dedup.Message, error)

// Handler wraps fn into a dedup.Handler whose database work is applied
// exactly once with the event's Kafka outputs. One runtime member's events
// run their database work one at a time in each of its Config.Lanes
// transactions; the members of an instance and the instances of the group
// each have their own.
func (ib *Inbox) Handler(fn Func) dedup.Handler {
	return dedup.HandlerFunc(func(ctx context.Context, ev *dedup.Event) ([]dedup.Message, error) {
		r, err := dedup.JoinResource(ctx, ib, func() (dedup.Resource, error) { return ib.newLanes(), nil })
		if err != nil {
			return nil, fmt.Errorf("inbox: %w", err)
		}
		return r.(*lanes).of(ev).handle(ctx, ev, fn)
	})
}

// Tx is the database transaction a Func works in. It is the runtime's to
// commit or roll back, so it offers only the statements; its methods are
// those of sqlc's DBTX and of *sql.Tx.
type Tx struct{ tx *sql.Tx }

// ExecContext runs a statement in the transaction.
func (t *Tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return t.tx.ExecContext(ctx, query, args...)
}

// QueryContext runs a query in the transaction.
func (t *Tx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return t.tx.QueryContext(ctx, query, args...)
}

// QueryRowContext runs a query of at most one row in the transaction.
func (t *Tx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return t.tx.QueryRowContext(ctx, query, args...)
}

// PrepareContext prepares a statement for the transaction.
func (t *Tx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return t.tx.PrepareContext(ctx, query)
}
