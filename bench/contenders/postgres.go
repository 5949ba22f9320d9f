package contenders

import (
	"context"
	"fmt"
	"strconv"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupkit/dedup/internal/wire"
)

// Schema is the processed_messages table of the seed document (primary key
// consumer + message ID; source position for tracing) and the business table
// the handler upserts (one row per order, with a unique business key).
const Schema = `
CREATE TABLE IF NOT EXISTS processed_messages (
  consumer_name    varchar(100) NOT NULL,
  message_id       varchar(120) NOT NULL,
  aggregate_id     varchar(120) NOT NULL,
  source_topic     varchar(120),
  source_partition int,
  source_offset    bigint,
  processed_at     timestamp NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer_name, message_id)
);
CREATE TABLE IF NOT EXISTS order_totals (
  order_id      varchar(120) PRIMARY KEY,
  events        int NOT NULL,
  last_event_id varchar(120) NOT NULL,
  updated_at    timestamp NOT NULL
);`

// ResetSQL empties the tables between runs: both of the seed document's and
// the postgres-inbox contender's inbox.
const ResetSQL = `TRUNCATE processed_messages, order_totals, ` + InboxTable

const (
	insertProcessed = `INSERT INTO processed_messages
  (consumer_name, message_id, aggregate_id, source_topic, source_partition, source_offset)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (consumer_name, message_id) DO NOTHING`
	upsertOrder = `INSERT INTO order_totals (order_id, events, last_event_id, updated_at)
VALUES ($1, 1, $2, now())
ON CONFLICT (order_id) DO UPDATE
SET events = order_totals.events + 1, last_event_id = EXCLUDED.last_event_id, updated_at = now()`
)

// postgresStage is the processed_messages pattern of the seed document: per
// event one transaction with INSERT ... ON CONFLICT DO NOTHING (one row
// affected: first time; none: duplicate, skip) and the business upsert, so
// the two commit together. The output is produced after the commit and the
// input offset marked once it is acknowledged (runPipe).
type postgresStage struct {
	pool    *pgxpool.Pool
	cfg     Config
	decoder wire.Decoder
}

func newPostgresStage(ctx context.Context, cfg Config) (*postgresStage, error) {
	pc, err := pgxpool.ParseConfig(cfg.PostgresDSN)
	if err != nil {
		return nil, fmt.Errorf("postgres DSN: %w", err)
	}
	pc.MaxConns = 16 // one per partition goroutine (12) and spare
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return &postgresStage{pool: pool, cfg: cfg, decoder: wire.Decoder{ID: wire.DefaultIDSource()}}, nil
}

func (s *postgresStage) Process(ctx context.Context, msg *sarama.ConsumerMessage) (bool, error) {
	ev, err := s.decoder.Decode(msg.Value, nil)
	if err != nil {
		return false, fmt.Errorf("decode: %w", err)
	}
	first := false
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, insertProcessed, s.cfg.Group, ev.EventID, ev.AggregateID,
			msg.Topic, msg.Partition, msg.Offset)
		if err != nil {
			return fmt.Errorf("insert processed_messages: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return nil // duplicate: nothing to do, the commit is empty
		}
		first = true
		if err := forwardHandler(ev); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, upsertOrder, ev.AggregateID, ev.EventID); err != nil {
			return fmt.Errorf("upsert order_totals: %w", err)
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("postgres transaction for %s (offset %s): %w", ev.EventID, strconv.FormatInt(msg.Offset, 10), err)
	}
	return first, nil
}

func (s *postgresStage) Close() error { s.pool.Close(); return nil }

// EnsureSchema creates the tables, the inbox's (package inbox's DDL) too;
// Reset empties them.
func EnsureSchema(ctx context.Context, dsn string) error {
	if err := execOnce(ctx, dsn, Schema); err != nil {
		return err
	}
	db, ib, err := openInbox(dsn, "bench", 1, nil)
	if err != nil {
		return err
	}
	defer db.Close()
	return ib.CreateTable(ctx)
}

// Reset empties the tables between runs.
func Reset(ctx context.Context, dsn string) error { return execOnce(ctx, dsn, ResetSQL) }

func execOnce(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	return nil
}
