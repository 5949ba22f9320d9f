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
	"time"
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

// Position is where a record was read from: kept in the seen record for
// tracing only.
type Position struct {
	Topic     string
	Partition int32
	Offset    int64
	Timestamp time.Time // the record timestamp
}

// DefaultRetention keeps seen IDs for a week, longer than Kafka's default
// topic retention, so a replay of everything still on the topic is judged.
const DefaultRetention = 7 * 24 * time.Hour
