// Package charge is the business logic of the payments example: each
// PaymentRequested event is charged at a payment provider, a call of 100 ms
// to seconds, and its result is written keyed by account. It is a plain
// dedup.Handler that honours its ctx, as a handler that calls out must.
package charge

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/dedupkit/dedup"
)

// Requested is the payload of a PaymentRequested event. Seq numbers an
// account's requests in the order they were made.
type Requested struct {
	Account string  `json:"account"`
	Seq     int     `json:"seq"`
	Amount  float64 `json:"amount"`
}

// Result is the record written for each charged request, keyed by account.
type Result struct {
	EventID string  `json:"eventId"`
	Account string  `json:"account"`
	Seq     int     `json:"seq"`
	Amount  float64 `json:"amount"`
	Status  string  `json:"status"`
}

// Provider charges an account. A real one is an HTTP or gRPC client of a
// payment provider, which deduplicates on the idempotency key too.
type Provider interface {
	Charge(ctx context.Context, idempotencyKey, account string, amount float64) error
}

// SlowProvider stands in for a payment provider that answers after
// Latency; it gives up when ctx ends, as an HTTP client does.
type SlowProvider struct{ Latency time.Duration }

func (p SlowProvider) Charge(ctx context.Context, _, _ string, _ float64) error {
	t := time.NewTimer(p.Latency)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Handler charges PaymentRequested events through p and writes a Result to
// the topology's output. A payload that is not a request is Permanent: no
// retry can fix it. A provider error is retried, then dead-lettered.
func Handler(p Provider) dedup.Handler {
	return dedup.HandlerFunc(func(ctx context.Context, ev *dedup.Event) ([]dedup.Message, error) {
		if ev.Type != "PaymentRequested" {
			return nil, nil
		}
		var r Requested
		if err := json.Unmarshal(ev.Payload, &r); err != nil || r.Account == "" {
			return nil, dedup.Permanent(fmt.Errorf("PaymentRequested payload %s: want account, seq and amount (%v)", ev.Payload, err))
		}
		// The event ID is the idempotency key: a provider that saw it
		// before answers as it did then.
		if err := p.Charge(ctx, ev.EventID, r.Account, r.Amount); err != nil {
			return nil, fmt.Errorf("charge %s: %w", ev.EventID, err)
		}
		v, err := json.Marshal(Result{EventID: ev.EventID, Account: r.Account, Seq: r.Seq, Amount: r.Amount, Status: "charged"})
		if err != nil {
			return nil, err
		}
		return []dedup.Message{{Key: r.Account, Value: v}}, nil
	})
}
