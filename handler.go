package dedup

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/dedupkit/dedup/codecs"
)

// Input is what a Handler sees: the decoded event and where it came from.
type Input struct {
	Event    *codecs.Event
	Key      string            // the input record key
	Headers  map[string][]byte // the input record headers
	Position Position
}

// Message is one record a handler wants written to the output topic.
type Message struct {
	Key     string
	Value   []byte
	Headers map[string][]byte
}

// Handler is the business logic a library user supplies. It runs once per
// first-seen event; its outputs are written together with the seen record.
// An error leaves the event unmarked: after the retries it goes to the
// dead-letter topic, and re-driving it from there processes it.
//
// Handlers must be deterministic in what they emit for an event and must not
// have side effects outside Kafka: only Kafka writes are covered by the
// exactly-once guarantee.
type Handler interface {
	Handle(ctx context.Context, in *Input) ([]Message, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, in *Input) ([]Message, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, in *Input) ([]Message, error) { return f(ctx, in) }

// Forward is the worker's default handler, a dedup bridge: every first-seen
// event goes to the output unchanged, same key, same value, same headers.
func Forward() Handler {
	return HandlerFunc(func(_ context.Context, in *Input) ([]Message, error) {
		return []Message{{Key: in.Key, Value: in.Event.Raw, Headers: in.Headers}}, nil
	})
}

// OrderPaid is the payload of the example's OrderPaid event.
type OrderPaid struct {
	OrderID   string  `json:"orderId"`
	PaymentID string  `json:"paymentId"`
	Amount    float64 `json:"amount"`
}

// Settlement is the example handler's output record.
type Settlement struct {
	PaymentID string    `json:"paymentId"`
	OrderID   string    `json:"orderId"`
	Amount    float64   `json:"amount"`
	EventID   string    `json:"eventId"`
	PaidAt    time.Time `json:"paidAt,omitzero"`
}

// Settlements is the example handler of the settlement-service story: each
// OrderPaid event becomes one settlement keyed by payment ID; other event
// types produce nothing (and are still marked seen). A malformed OrderPaid
// payload is a handler error, so it ends in the dead-letter topic unmarked.
func Settlements() Handler {
	return HandlerFunc(func(_ context.Context, in *Input) ([]Message, error) {
		if in.Event.Type != "OrderPaid" {
			return nil, nil
		}
		var p OrderPaid
		if err := json.Unmarshal(in.Event.Payload, &p); err != nil {
			return nil, fmt.Errorf("OrderPaid payload: %w", err)
		}
		if p.PaymentID == "" {
			return nil, fmt.Errorf("OrderPaid payload has no paymentId")
		}
		s := Settlement{PaymentID: p.PaymentID, OrderID: p.OrderID, Amount: p.Amount,
			EventID: in.Event.EventID, PaidAt: in.Event.OccurredAt}
		value, err := json.Marshal(s)
		if err != nil {
			return nil, err
		}
		return []Message{{Key: p.PaymentID, Value: value, Headers: map[string][]byte{
			"source-offset": []byte(strconv.FormatInt(in.Position.Offset, 10)),
		}}}, nil
	})
}
