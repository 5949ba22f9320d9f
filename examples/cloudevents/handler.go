package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/dedupkit/dedup"
)

// TypeShipped is the CloudEvents type that gets a customer notification.
const TypeShipped = "com.example.order.shipped"

// cloudEvent is a CloudEvents 1.0 event in structured mode: the attributes
// and the data in one JSON document, the record value.
type cloudEvent struct {
	SpecVersion string          `json:"specversion"`
	ID          string          `json:"id"` // new on every publish: not what the worker dedups by
	Source      string          `json:"source"`
	Type        string          `json:"type"`
	Time        string          `json:"time,omitempty"`
	Data        json.RawMessage `json:"data"`
}

// shipped is the data of a TypeShipped event. EventID is the event's own ID,
// the same in every copy the publisher sends.
type shipped struct {
	EventID      string `json:"eventId"`
	OrderID      string `json:"orderId"`
	CustomerID   string `json:"customerId"`
	Carrier      string `json:"carrier"`
	TrackingCode string `json:"trackingCode"`
}

// notification is what the notifications topic carries: a message a
// mailer sends to a customer. EventID lets the mailer tell a message it
// has sent from a new one, should it ever see one twice (its own retries).
type notification struct {
	EventID    string `json:"eventId"`
	CustomerID string `json:"customerId"`
	Text       string `json:"text"`
}

// handler fans each first-seen event out to two topics, in one transaction:
//   - analytics: every event, as a CloudEvent in binary mode (the data as
//     the value, the attributes as ce_ headers in a fixed order), with
//     ce_id set to the stable event ID, so downstream
//     consumers see one ID per event however often it was published;
//   - notifications: for TypeShipped only, a message to the customer.
//
// Data that does not parse as its type's schema is rejected with
// dedup.Permanent: no retry will fix it, so the event goes to the
// dead-letter topic at once, and nothing of it is written to either topic.
func handler(notifications, analytics string) dedup.Handler {
	return dedup.HandlerFunc(func(_ context.Context, ev *dedup.Event) ([]dedup.Message, error) {
		var ce cloudEvent
		if err := json.Unmarshal(ev.Value, &ce); err != nil {
			return nil, dedup.Permanent(fmt.Errorf("CloudEvent: %w", err))
		}
		var out []dedup.Message
		if ce.Type == TypeShipped {
			var s shipped
			if err := json.Unmarshal(ce.Data, &s); err != nil {
				return nil, dedup.Permanent(fmt.Errorf("%s data: %w", ce.Type, err))
			}
			if s.OrderID == "" || s.CustomerID == "" {
				return nil, dedup.Permanent(errors.New(ce.Type + " data: orderId and customerId are required"))
			}
			text := fmt.Sprintf("Your order %s has shipped with %s, tracking code %s.", s.OrderID, s.Carrier, s.TrackingCode)
			body, err := json.Marshal(notification{EventID: ev.EventID, CustomerID: s.CustomerID, Text: text})
			if err != nil {
				return nil, err
			}
			out = append(out, dedup.Message{Topic: notifications, Key: s.CustomerID, Value: body,
				Headers: dedup.Headers{{Key: "ce_type", Value: []byte(ce.Type)}, {Key: "event-id", Value: []byte(ev.EventID)}}})
		}
		h := dedup.Headers{
			{Key: "ce_specversion", Value: []byte("1.0")},
			{Key: "ce_id", Value: []byte(ev.EventID)},
			{Key: "ce_source", Value: []byte(ce.Source)},
			{Key: "ce_type", Value: []byte(ce.Type)},
		}
		if ce.Time != "" {
			h = append(h, dedup.Header{Key: "ce_time", Value: []byte(ce.Time)})
		}
		h = append(h, dedup.Header{Key: "content-type", Value: []byte("application/json")})
		return append(out, dedup.Message{Topic: analytics, Key: ev.Key, Value: ce.Data, Headers: h}), nil
	})
}
