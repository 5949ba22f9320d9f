// Package dedup defines an exactly-once deduplicating Kafka consumer: what
// to read, where the event ID is, the handler and the outputs (Define), and
// the handler's contract (Handler). A runtime runs the definition: package
// processor, with the seen-ID mark, the handler's output and the input
// offset in one Kafka transaction. docs/library.md is the guide; package
// deduptest runs a definition in memory for unit tests.
//
// Consumer isolation comes from the consumer group: each group has its own
// table, the goka group table "<group>-table", so a settlement consumer and a
// notification consumer each process the same event once. Two groups never
// share seen IDs.
package dedup

import (
	"errors"
	"fmt"
	"time"

	"github.com/dedupkit/dedup/codecs"
	"github.com/dedupkit/dedup/internal/wire"
)

// KeyType selects what makes two events "the same".
type KeyType string

const (
	// KeyEventID dedups by the producer-made event ID (the default). Never the
	// offset: a re-published event has a new offset but the same ID.
	KeyEventID KeyType = "event-id"
	// KeyAggregateID processes at most one event per aggregate within the
	// retention: a deliberate business rule ("once per order per day"), not a
	// general dedup.
	KeyAggregateID KeyType = "aggregate-id"
)

// ErrNoAggregateID is returned by Key in aggregate-id mode for events that
// carry no aggregate ID.
var ErrNoAggregateID = errors.New("event has no aggregate ID")

// Verdict is the outcome of looking an event up in the table.
type Verdict int

const (
	// First: never seen (or not within the retention): process it.
	First Verdict = iota
	// Duplicate: seen and not expired: skip it.
	Duplicate
	// Expired: seen, but the record is past its expiry: process it again.
	Expired
	// TooOld: not in the table, but the event is older than the retention, so
	// its record could have expired: the table cannot judge it.
	TooOld
)

func (v Verdict) String() string {
	switch v {
	case First:
		return "first"
	case Duplicate:
		return "duplicate"
	case Expired:
		return "expired"
	case TooOld:
		return "too-old"
	}
	return fmt.Sprintf("verdict(%d)", int(v))
}

// Position is where a record was read from: kept in the seen record for
// tracing only.
type Position struct {
	Topic     string
	Partition int32
	Offset    int64
	Timestamp time.Time // the record timestamp
}

// Table is the pure dedup logic: which key, what verdict, which record to
// store. It holds no state; the runtime owns the storage.
type Table struct {
	KeyType   KeyType
	Retention time.Duration
}

// DefaultRetention keeps seen IDs for a week, longer than Kafka's default
// topic retention, so a replay of everything still on the topic is judged.
const DefaultRetention = 7 * 24 * time.Hour

// Validate reports a table that cannot work.
func (t Table) Validate() error {
	switch t.KeyType {
	case KeyEventID, KeyAggregateID:
	default:
		return fmt.Errorf("key type %q: want %q or %q", t.KeyType, KeyEventID, KeyAggregateID)
	}
	if t.Retention <= 0 {
		return fmt.Errorf("retention %v: must be positive", t.Retention)
	}
	return nil
}

// Key returns the dedup key of an event. In event-id mode with CloudEvents
// headers the key is ce_source and ce_id joined by a NUL byte, which the
// decoder refuses in ce_source, so distinct pairs never collide.
func (t Table) Key(ev *wire.Event) (string, error) {
	if t.KeyType == KeyAggregateID {
		if ev.AggregateID == "" {
			return "", ErrNoAggregateID
		}
		return ev.AggregateID, nil
	}
	if ev.Source != "" {
		return ev.Source + "\x00" + ev.EventID, nil
	}
	return ev.EventID, nil
}

// EventTime is the time an event happened: its occurredAt, else the record
// timestamp.
func EventTime(ev *wire.Event, pos Position) time.Time {
	if !ev.OccurredAt.IsZero() {
		return ev.OccurredAt
	}
	return pos.Timestamp
}

// Judge decides what to do with an event given the table's record for its
// key (nil when there is none).
func (t Table) Judge(existing *codecs.SeenRecord, eventTime, now time.Time) Verdict {
	if existing != nil {
		if existing.Expired(now) {
			return Expired
		}
		return Duplicate
	}
	if !eventTime.IsZero() && eventTime.Before(now.Add(-t.Retention)) {
		return TooOld
	}
	return First
}

// Record builds the seen record to store after the handler succeeded.
func (t Table) Record(ev *wire.Event, pos Position, now time.Time) *codecs.SeenRecord {
	return &codecs.SeenRecord{
		FirstProcessed: now,
		EventTime:      EventTime(ev, pos),
		AggregateID:    ev.AggregateID,
		Topic:          pos.Topic,
		Partition:      pos.Partition,
		Offset:         pos.Offset,
		ExpiresAt:      now.Add(t.Retention),
	}
}
