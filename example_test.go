package dedup_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/dedupkit/dedup"
)

// A settlement service: OrderPaid events, deduplicated by the nested
// meta.eventId, become a settlement and an audit record. Define validates
// the whole topology once; a runtime (processor.New) runs it.
func ExampleDefine() {
	top, err := dedup.Define("settlement-service",
		dedup.Input("order.events"),
		dedup.EventID(dedup.JSONField("meta.eventId")),
		dedup.Output("settlements", "audit"),
		dedup.Retention(14*24*time.Hour),
		dedup.HandleFunc(func(ctx context.Context, ev *dedup.Event) ([]dedup.Message, error) {
			return []dedup.Message{
				{Topic: "settlements", Key: ev.AggregateID, Value: ev.Value},
				{Topic: "audit", Key: ev.EventID, Value: []byte(ev.Topic)},
			}, nil
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("table:", top.TableTopic())
	fmt.Println("dead letters:", top.DLQ)
	fmt.Println("outputs:", top.Outputs)
	// Output:
	// table: settlement-service-table
	// dead letters: settlement-service-dlq
	// outputs: [settlements audit]
}

// Define names every option that is wrong at once.
func ExampleDefine_invalid() {
	_, err := dedup.Define("orders",
		dedup.Output("orders"),
		dedup.Retention(0))
	fmt.Println(err)
	// Output:
	// dedup.Define("orders"): no input topic
	// retention 0s: must be positive
}

// A topic and its retry topic read by one group: an event re-published
// to the retry topic after it was processed from the first is skipped.
func ExampleInput() {
	top, err := dedup.Define("settlement-service",
		dedup.Input("order.events", "order.events.retry"),
		dedup.Output("settlements"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("inputs:", top.Inputs)
	fmt.Println("table:", top.TableTopic())
	// Output:
	// inputs: [order.events order.events.retry]
	// table: settlement-service-table
}

// A handler returns its messages, in order, for any declared output. Input
// it can never accept is Permanent: dead-lettered at once, not retried.
func ExampleHandlerFunc() {
	type orderPaid struct {
		PaymentID string `json:"paymentId"`
	}
	h := dedup.HandlerFunc(func(ctx context.Context, ev *dedup.Event) ([]dedup.Message, error) {
		var p orderPaid
		if err := json.Unmarshal(ev.Payload, &p); err != nil || p.PaymentID == "" {
			return nil, dedup.Permanent(errors.New("not an OrderPaid payload"))
		}
		return []dedup.Message{{Key: p.PaymentID, Value: ev.Payload,
			Headers: dedup.Headers{{Key: "event-id", Value: []byte(ev.EventID)}}}}, nil
	})

	ev := &dedup.Event{EventID: "e1"}
	for _, payload := range []string{`{"paymentId":"pay-9"}`, `"garbage"`} {
		ev.Payload = []byte(payload)
		out, err := h.Handle(context.Background(), ev)
		fmt.Println(len(out), dedup.IsPermanent(err))
	}
	// Output:
	// 1 false
	// 0 true
}
