package dedup

import (
	"context"
	"errors"
	"time"
)

// Header is one record header. Kafka allows a key to repeat and keeps the
// order, so headers are a list, not a map.
type Header struct {
	Key   string
	Value []byte
}

// Headers are a record's headers in the order they were written.
type Headers []Header

// Get returns the value of the last header named key, as Kafka's Java client
// (lastHeader) reads it, and false when there is none.
func (h Headers) Get(key string) ([]byte, bool) {
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Key == key {
			return h[i].Value, true
		}
	}
	return nil, false
}

// Event is one first-seen event as a Handler sees it: where the record was
// read, the record itself, and what the topology decoded from it. For an
// event that was re-keyed through the loop topic, Position, Key and Headers
// are those of the original input record.
type Event struct {
	Position         // topic, partition, offset and timestamp of the input record
	Key      string  // the input record key
	Headers  Headers // the input record headers, in order
	Value    []byte  // the input record value, as it arrived
	EventID  string  // the event ID the record was judged by
	// AggregateID is the envelope's aggregate ID (JSON "aggregateId", or
	// the CloudEvents ce_subject header); empty when the record has none.
	AggregateID string
	// Type, OccurredAt and Payload are the JSON envelope's "type",
	// "occurredAt" and "payload". For IDs from a header, the record key or
	// an IDFunc the body is not parsed: Payload is the record value
	// (OccurredAt is CloudEvents' ce_time, when present).
	Type       string
	OccurredAt time.Time
	Payload    []byte
}

// Message is one record a handler wants written. Topic must be one of the
// topology's outputs; it may be empty when the topology has exactly one.
type Message struct {
	Topic   string
	Key     string
	Value   []byte
	Headers Headers
}

// Handler is the business logic a library user supplies. It runs for each
// first-seen event; the messages it returns are written, in order, in the
// same Kafka transaction as the event's seen mark and input offset.
//
// The contract:
//   - nil error: the messages are written and the event is marked seen.
//   - an error wrapped with Permanent: the event goes to the dead-letter
//     topic at once (reason handler-permanent), unmarked, with no retries.
//   - any other error: the handler is retried with backoff (the Retries
//     option); after the last retry the event goes to the dead-letter topic
//     (reason handler-error), unmarked. Re-driving it from there processes
//     it.
//   - a panic: recovered, the event goes to the dead-letter topic (reason
//     handler-panic) with the panic's value, the stack is logged, and the
//     worker goes on.
//   - ctx cancelled (the worker stops, or a rebalance takes the partition
//     away): return ctx.Err() (or any error). The event is neither marked
//     nor dead-lettered, the transaction is aborted, and whoever owns the
//     partition next processes it exactly once.
//   - an error wrapping ErrInterrupted: the same, while ctx goes on; the
//     runtime aborts the transaction and processes the event again. For a
//     resource the transaction cannot commit without (a database that went
//     away), where retrying the event alone cannot help and a dead letter
//     would be wrong.
//
// A dead-lettered event stays unmarked, so each redelivered copy of it is
// handled again (and dead-lettered again if it fails the same way); the
// dead letter carries the headers HeaderDLQReason, HeaderDLQError and the
// source topic, partition and offset.
//
// A handler must emit the same messages for the same event (it may run
// again after an aborted transaction) and must not have side effects
// outside Kafka: only Kafka writes are covered by the exactly-once
// guarantee. A sink that writes elsewhere should upsert on a business key.
type Handler interface {
	Handle(ctx context.Context, ev *Event) ([]Message, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, ev *Event) ([]Message, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, ev *Event) ([]Message, error) { return f(ctx, ev) }

// Forward is the worker's default handler, a dedup bridge: every first-seen
// event goes to the (single) output unchanged, same key, value and headers.
func Forward() Handler {
	return HandlerFunc(func(_ context.Context, ev *Event) ([]Message, error) {
		return []Message{{Key: ev.Key, Value: ev.Value, Headers: ev.Headers}}, nil
	})
}

// permanentError marks a handler error that no retry can fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent wraps err so the topology dead-letters the event at once
// instead of retrying: for input the handler can never accept (a payload
// that does not parse, a business rule that rejects it). Permanent(nil) is
// nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err was wrapped with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// ErrInterrupted is what a runtime gets back from the topology when the
// handler gave up because its context was cancelled (shutdown or
// revocation), or returned an error wrapping it: the transaction must be
// aborted, nothing of the event kept.
var ErrInterrupted = errors.New("handler interrupted: the transaction aborts and the event runs again")

// Record is one consumed record as an IDFunc sees it.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Timestamp time.Time
	Key       string
	Headers   Headers
	Value     []byte
}
