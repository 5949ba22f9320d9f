// Package debit is the ledger service's business logic: a payment event
// debits its account in PostgreSQL and yields a settlement record, through
// the inbox, so both happen once per event.
package debit

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx" driver

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/inbox"
)

// Schema is the service's own tables. debits has no unique key on the
// event: the inbox, not a constraint, keeps an event from being applied
// twice, and a row twice would show it.
const Schema = `CREATE TABLE IF NOT EXISTS accounts (
  id      text   PRIMARY KEY,
  balance bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS debits (
  id         bigserial   PRIMARY KEY,
  event_id   text        NOT NULL,
  account    text        NOT NULL,
  amount     bigint      NOT NULL,
  debited_at timestamptz NOT NULL DEFAULT now()
);`

// Open opens the ledger's PostgreSQL database through pgx's database/sql
// driver, with an inbox of cfg, and creates the inbox's and Schema's tables
// when missing.
func Open(ctx context.Context, dsn string, cfg inbox.Config) (*sql.DB, *inbox.Inbox, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, nil, err
	}
	ib, err := inbox.New(db, cfg)
	if err == nil {
		err = ib.CreateTable(ctx)
	}
	if err == nil {
		err = CreateTables(ctx, db)
	}
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, ib, nil
}

// CreateTables creates the tables of Schema when missing. Instances that
// start together take turns (an advisory lock): PostgreSQL's CREATE TABLE IF
// NOT EXISTS fails, rather than waits, when another session creates the same
// table at that moment.
func CreateTables(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('ledger schema'))`); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, Schema); err != nil {
		return fmt.Errorf("create the ledger's tables: %w", err)
	}
	return tx.Commit()
}

// Payment is a PaymentRequested event's payload.
type Payment struct {
	Account string `json:"account"`
	Amount  int64  `json:"amount"` // in cents; positive
}

// Settlement is the record written for each debit, keyed by account.
type Settlement struct {
	EventID string `json:"eventId"`
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
	Balance int64  `json:"balance"` // the account's balance after the debit
}

const (
	upsertBalance = `INSERT INTO accounts (id, balance) VALUES ($1, -$2::bigint)
ON CONFLICT (id) DO UPDATE SET balance = accounts.balance - $2::bigint
RETURNING balance`
	insertDebit = `INSERT INTO debits (event_id, account, amount) VALUES ($1, $2, $3)`
)

// Handler is Debit through ib: each event's debit and settlement once.
func Handler(ib *inbox.Inbox, output string) dedup.Handler { return ib.Handler(Debit(output)) }

// Debit debits the event's account in tx and returns its settlement for
// output. A payment without an account or with an amount that is not
// positive can never succeed: it is dead-lettered at once (dedup.Permanent).
func Debit(output string) inbox.Func {
	return func(ctx context.Context, tx *inbox.Tx, ev *dedup.Event) ([]dedup.Message, error) {
		var p Payment
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			return nil, dedup.Permanent(fmt.Errorf("payload: %w", err))
		}
		if p.Account == "" || p.Amount <= 0 {
			return nil, dedup.Permanent(errors.New("payload: want an account and a positive amount"))
		}
		s := Settlement{EventID: ev.EventID, Account: p.Account, Amount: p.Amount}
		if err := tx.QueryRowContext(ctx, upsertBalance, p.Account, p.Amount).Scan(&s.Balance); err != nil {
			return nil, fmt.Errorf("debit %s: %w", p.Account, err)
		}
		if _, err := tx.ExecContext(ctx, insertDebit, ev.EventID, p.Account, p.Amount); err != nil {
			return nil, fmt.Errorf("record the debit: %w", err)
		}
		value, err := json.Marshal(s)
		if err != nil {
			return nil, err
		}
		return []dedup.Message{{Topic: output, Key: p.Account, Value: value}}, nil
	}
}

// Topology is the service: payments in, settlements out, through h
// (Handler: each event's debit and settlement exactly once).
func Topology(group, input, output string, h dedup.Handler) (*dedup.Topology, error) {
	return dedup.Define(group,
		dedup.Input(input),
		// The producer puts a unique "eventId" in every event and keeps it
		// when it re-sends.
		dedup.EventID(dedup.JSONField("eventId")),
		dedup.Output(output),
		dedup.Handle(h))
}
