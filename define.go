package dedup

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Option sets one part of a topology in Define.
type Option func(*Topology)

// Define builds the topology of consumer group group: the group is the
// consumer's name, and its seen IDs (the table "<group>-table") are its
// own, so two services reading the same events each process every event
// once. Options not given take the defaults: the event ID from the JSON
// field "eventId", dedup by event ID, DefaultRetention, DefaultHandlerRetries
// with DefaultRetryBackoff, stale events processed, re-keying on, the
// dead-letter topic "<group>-dlq" and the Forward handler. The result is
// validated once; the error names every option that is wrong.
//
//	top, err := dedup.Define("settlement-service",
//		dedup.Input("order.events"),
//		dedup.EventID(dedup.JSONField("meta.eventId")),
//		dedup.Output("settlements", "audit"),
//		dedup.Handle(handler))
func Define(group string, opts ...Option) (*Topology, error) {
	t := &Topology{
		Group:          group,
		DLQ:            group + "-dlq",
		KeyType:        KeyEventID,
		Retention:      DefaultRetention,
		EventID:        JSONField("eventId"),
		Handler:        Forward(),
		HandlerRetries: DefaultHandlerRetries,
		RetryBackoff:   DefaultRetryBackoff,
		StaleEvents:    StaleProcess,
		Rekey:          RekeyAlways,
	}
	for _, o := range opts {
		o(t)
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("dedup.Define(%q): %w", group, err)
	}
	return t, nil
}

// Input names topics the group reads its events from. Repeatable. All
// inputs share the group's table, so an event that arrives on two of them
// (a topic and its retry topic, two regions' copies) is processed once;
// they must have the same partition count, since partition p of every
// input is read with table partition p.
func Input(topics ...string) Option {
	return func(t *Topology) { t.Inputs = append(t.Inputs, topics...) }
}

// Output declares the topics the handler may write. Repeatable. A Message
// may leave its Topic empty only when there is exactly one output; with
// several, such a message dead-letters its event (reason bad-output).
func Output(topics ...string) Option {
	return func(t *Topology) { t.Outputs = append(t.Outputs, topics...) }
}

// DeadLetter names the dead-letter topic (default "<group>-dlq").
func DeadLetter(topic string) Option { return func(t *Topology) { t.DLQ = topic } }

// Retention is how long a seen ID is remembered; keep it longer than the
// input topic's retention so that a replay of the whole topic is judged.
func Retention(d time.Duration) Option { return func(t *Topology) { t.Retention = d } }

// KeyBy selects what makes two events the same: KeyEventID (default) or
// KeyAggregateID (once per aggregate within the retention).
func KeyBy(k KeyType) Option { return func(t *Topology) { t.KeyType = k } }

// StaleEvents is the policy for unseen events older than the retention.
func StaleEvents(p StalePolicy) Option { return func(t *Topology) { t.StaleEvents = p } }

// Rekey sets the re-keying policy (RekeyAlways by default).
func Rekey(p RekeyPolicy) Option { return func(t *Topology) { t.Rekey = p } }

// Retries sets how often a failing handler is retried and the first pause,
// doubled each time. Retries(0, 0) dead-letters at the first error.
func Retries(n int, backoff time.Duration) Option {
	return func(t *Topology) { t.HandlerRetries, t.RetryBackoff = n, backoff }
}

// HandlerTimeout bounds one handler call (default DefaultHandlerTimeout):
// past it the call's ctx is cancelled and the attempt counts as failed.
func HandlerTimeout(d time.Duration) Option { return func(t *Topology) { t.HandlerTimeout = d } }

// Concurrency lets the exactly-once runtime run up to n handler calls at
// once per member (default 1), for handlers that wait on a payment API,
// another service or a database. Events with the same dedup key run in
// offset order, one at a time; see OrderByRecordKey for record keys.
func Concurrency(n int) Option { return func(t *Topology) { t.Concurrency = n } }

// OrderByRecordKey keeps the events of one record key in offset order
// under Concurrency: one call at a time per record key.
func OrderByRecordKey() Option { return func(t *Topology) { t.OrderByRecordKey = true } }

// Handle sets the handler (default Forward).
func Handle(h Handler) Option { return func(t *Topology) { t.Handler = h } }

// HandleFunc sets a function as the handler.
func HandleFunc(f func(ctx context.Context, ev *Event) ([]Message, error)) Option {
	return Handle(HandlerFunc(f))
}

// IDSource says where the event ID of a record is found. Build it with
// JSONField, HeaderID, CloudEvents, RecordKey or IDFunc: exactly one way is
// set.
type IDSource struct {
	// Field is a field of the JSON body; a dotted path ("meta.eventId")
	// reads it from nested objects.
	Field string
	// Header is the record header holding the ID; the body is not parsed.
	Header string
	// SourceHeader, with Header, is the header whose value the ID is unique
	// together with (CloudEvents' ce_source); both must be present.
	SourceHeader string
	// Key takes the record key as the ID; the body is not parsed.
	Key bool
	// Func computes the ID from the record; the body is not parsed. An
	// error dead-letters the record (reason no-id).
	Func func(Record) (string, error)
}

// EventID sets where the event ID is found (default JSONField("eventId")).
func EventID(s IDSource) Option { return func(t *Topology) { t.EventID = s } }

// JSONField reads the ID from a field of the JSON body; a dotted path
// ("meta.eventId") reads it from nested objects. The envelope's
// "aggregateId", "type", "occurredAt" and "payload" stay top-level. A body
// in which one of these, or a step of the path, occurs twice is
// dead-lettered as "duplicate-field": parsers disagree on which copy counts.
func JSONField(path string) IDSource { return IDSource{Field: path} }

// HeaderID reads the ID from a record header; the body is not parsed.
// With unique set, the ID is unique only together with that header's value
// (both must be present).
func HeaderID(name, unique string) IDSource { return IDSource{Header: name, SourceHeader: unique} }

// CloudEvents reads the ID of CloudEvents in binary mode: the ce_id header,
// unique together with ce_source; ce_subject is the aggregate ID, ce_time
// the event time. For structured mode (the whole event as JSON), use
// JSONField("id").
func CloudEvents() IDSource { return IDSource{Header: "ce_id", SourceHeader: "ce_source"} }

// RecordKey takes the record key as the event ID; the body is not parsed.
func RecordKey() IDSource { return IDSource{Key: true} }

// IDFunc computes the ID with fn; the body is not parsed by the topology.
// An error dead-letters the record (reason no-id).
func IDFunc(fn func(Record) (string, error)) IDSource {
	if fn == nil {
		return IDSource{Func: func(Record) (string, error) { return "", errors.New("IDFunc(nil)") }}
	}
	return IDSource{Func: fn}
}

// validate reports an IDSource that names no way, or more than one, to find
// the ID.
func (s IDSource) validate() error {
	ways := 0
	for _, set := range []bool{s.Field != "", s.Header != "", s.Key, s.Func != nil} {
		if set {
			ways++
		}
	}
	switch {
	case ways != 1:
		return fmt.Errorf("event ID: set exactly one of a JSON field, a header, the record key or a func (JSONField, HeaderID, CloudEvents, RecordKey, IDFunc); %d are set", ways)
	case s.SourceHeader != "" && s.Header == "":
		return errors.New("event ID: a source header works only with a header ID")
	}
	return nil
}
