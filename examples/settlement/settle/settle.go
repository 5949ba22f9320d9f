// Package settle is the business logic of the settlement example: OrderPaid
// events become settlements keyed by payment ID, and each settlement is
// also recorded on an audit topic. It is a plain dedup.Handler, so it runs
// in the example program (examples/settlement), in the demo (cmd/demo,
// --handler settlements) and in unit tests without a broker (package deduptest).
package settle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dedupkit/dedup"
)

// OrderPaid is the payload of an OrderPaid event.
type OrderPaid struct {
	OrderID   string  `json:"orderId"`
	PaymentID string  `json:"paymentId"`
	Amount    float64 `json:"amount"`
}

// Settlement is the record written for each paid order. A downstream sink
// upserts it on PaymentID, the business key, so that even a sink that is
// not exactly-once stores one row per payment.
type Settlement struct {
	PaymentID string    `json:"paymentId"`
	OrderID   string    `json:"orderId"`
	Amount    float64   `json:"amount"`
	EventID   string    `json:"eventId"`
	PaidAt    time.Time `json:"paidAt,omitzero"`
}

// Audit is the audit topic's record of a settlement: which event made it
// and where that event was read.
type Audit struct {
	EventID   string `json:"eventId"`
	PaymentID string `json:"paymentId"`
	Source    string `json:"source"` // topic/partition@offset of the input record
}

// Handler settles OrderPaid events; other event types produce nothing (and
// are still marked seen). settlements and audit name the output topics;
// settlements "" means the topology's only output, audit "" writes no audit
// record. A payload that is not an OrderPaid is rejected as Permanent: no
// retry can fix it, so it goes to the dead-letter topic at once.
func Handler(settlements, audit string) dedup.Handler {
	return dedup.HandlerFunc(func(_ context.Context, ev *dedup.Event) ([]dedup.Message, error) {
		if ev.Type != "OrderPaid" {
			return nil, nil
		}
		var p OrderPaid
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			return nil, dedup.Permanent(fmt.Errorf("OrderPaid payload: %w", err))
		}
		if p.PaymentID == "" {
			return nil, dedup.Permanent(errors.New("OrderPaid payload has no paymentId"))
		}
		s, err := json.Marshal(Settlement{PaymentID: p.PaymentID, OrderID: p.OrderID, Amount: p.Amount,
			EventID: ev.EventID, PaidAt: ev.OccurredAt})
		if err != nil {
			return nil, err
		}
		out := []dedup.Message{{Topic: settlements, Key: p.PaymentID, Value: s,
			Headers: dedup.Headers{{Key: "source-offset", Value: []byte(strconv.FormatInt(ev.Offset, 10))}}}}
		if audit != "" {
			a, err := json.Marshal(Audit{EventID: ev.EventID, PaymentID: p.PaymentID,
				Source: fmt.Sprintf("%s/%d@%d", ev.Topic, ev.Partition, ev.Offset)})
			if err != nil {
				return nil, err
			}
			out = append(out, dedup.Message{Topic: audit, Key: ev.EventID, Value: a})
		}
		return out, nil
	})
}
