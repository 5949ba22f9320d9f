// Package wire reads the events of the input topics: the event ID from a
// JSON field, a header or the record key, the envelope's other fields, and
// the reason a record that cannot be read is dead-lettered with.
package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxIDLength bounds event and aggregate IDs. A dedup key is stored in every
// seen record and every changelog message; an unbounded ID would let one bad
// producer blow up the table.
const MaxIDLength = 256

// Event is the JSON envelope of a business event:
//
//	{"eventId","aggregateId","type","occurredAt","payload"}
//
// Raw keeps the bytes as they arrived so the default handler can forward the
// event unchanged, byte for byte.
type Event struct {
	EventID     string          `json:"eventId"`
	AggregateID string          `json:"aggregateId,omitempty"`
	Type        string          `json:"type,omitempty"`
	OccurredAt  time.Time       `json:"occurredAt,omitzero"`
	Payload     json.RawMessage `json:"payload,omitempty"`

	// Source is the CloudEvents ce_source attribute when the ID comes from
	// headers; the ID is only unique together with it.
	Source string `json:"-"`
	// Raw is the record value the event was decoded from.
	Raw []byte `json:"-"`
}

// IDSource says where the event ID of a record is found.
type IDSource struct {
	// Field is the JSON field that holds the ID (default "eventId"); a
	// dotted path ("meta.eventId") reads it from nested objects. Used when
	// Header is empty.
	Field string
	// Header, when set, takes the ID from this record header instead of the
	// body (CloudEvents binary mode: "ce_id"). The body is then opaque.
	Header string
	// SourceHeader is the header whose value makes the ID unique in header
	// mode (CloudEvents: "ce_source"). Empty means the ID alone is unique.
	SourceHeader string
	// Key, when true, takes the ID from the record key; the body is then
	// opaque. The topology reads it; Decoder does not see record keys.
	Key bool
}

// DefaultIDSource reads the ID from the "eventId" JSON field.
func DefaultIDSource() IDSource { return IDSource{Field: "eventId"} }

// CloudEventsIDSource reads the ID from CloudEvents binary-mode headers.
func CloudEventsIDSource() IDSource { return IDSource{Header: "ce_id", SourceHeader: "ce_source"} }

// Validate reports a configuration that cannot find an ID.
func (s IDSource) Validate() error {
	if s.Header == "" && s.Field == "" && !s.Key {
		return fmt.Errorf("codecs: IDSource needs a JSON field or a header")
	}
	return nil
}

// Decoder turns a record (value and headers) into an Event. It is not a
// goka.Codec on purpose: header-mode IDs need the record headers, which a
// codec never sees, and a failing input codec would stop goka's processor
// instead of sending the record to the dead-letter topic.
type Decoder struct {
	ID IDSource
}

// Decode parses value into an Event. Errors are *DecodeError values whose
// Kind is one of the sentinels in errors.go.
func (d Decoder) Decode(value []byte, headers map[string][]byte) (*Event, error) {
	if value == nil {
		return nil, newDecodeError(ErrNullValue, "record value is null (tombstone)")
	}
	if len(value) == 0 {
		return nil, newDecodeError(ErrEmptyValue, "record value has zero bytes")
	}
	if d.ID.Header != "" {
		return d.decodeHeaders(value, headers)
	}
	return decodeJSON(value, d.ID.fieldOrDefault())
}

func (s IDSource) fieldOrDefault() string {
	if s.Field == "" {
		return "eventId"
	}
	return s.Field
}

// decodeHeaders maps CloudEvents binary-mode attributes onto an Event. The
// body is the event data and is not parsed.
func (d Decoder) decodeHeaders(value []byte, headers map[string][]byte) (*Event, error) {
	id, ok := headers[d.ID.Header]
	if !ok || len(id) == 0 {
		return nil, newDecodeError(ErrNoID, fmt.Sprintf("header %q is missing or empty", d.ID.Header))
	}
	ev := &Event{EventID: string(id), Payload: value, Raw: value}
	if d.ID.SourceHeader != "" {
		src, ok := headers[d.ID.SourceHeader]
		if !ok || len(src) == 0 {
			return nil, newDecodeError(ErrNoID, fmt.Sprintf("header %q is missing or empty; the ID is only unique together with it", d.ID.SourceHeader))
		}
		ev.Source = string(src)
	}
	ev.AggregateID = string(headers["ce_subject"])
	ev.Type = string(headers["ce_type"])
	if t, ok := headers["ce_time"]; ok {
		at, err := time.Parse(time.RFC3339Nano, string(t))
		if err != nil {
			return nil, newDecodeError(ErrBadField, fmt.Sprintf("header ce_time: %v", err))
		}
		ev.OccurredAt = at
	}
	if err := checkIDs(ev, d.ID.Header); err != nil {
		return nil, err
	}
	return ev, nil
}

// The members decodeJSON reads, one bit each, to find a name that repeats.
const (
	memberID uint8 = 1 << iota
	memberAggregateID
	memberType
	memberOccurredAt
	memberPayload
)

func memberBit(key []byte) uint8 {
	switch string(key) { // no allocation for these comparisons
	case "aggregateId":
		return memberAggregateID
	case "type":
		return memberType
	case "occurredAt":
		return memberOccurredAt
	case "payload":
		return memberPayload
	}
	return 0
}

// decodeJSON reads the envelope in one pass (scanObject) and decodes only the
// members it needs. Member names match exactly (encoding/json would also take
// "EventID" for "eventId"). A member it reads that occurs twice is refused
// (ErrDuplicateField): encoding/json takes the last one, other parsers the
// first, so the event's identity would depend on who reads it.
func decodeJSON(value []byte, idField string) (*Event, error) {
	// encoding/json replaces invalid UTF-8 with U+FFFD, which would make
	// IDs that differ only in their bad bytes one dedup key: refuse them.
	if !utf8.Valid(value) {
		if !startsLikeObject(value) {
			return nil, newDecodeError(ErrNotJSON, describeNotJSON(value))
		}
		return nil, newDecodeError(ErrBadField, "value is not valid UTF-8")
	}
	ev := &Event{Raw: value}
	idHead, idRest := splitPath(idField)
	var fieldErr, dupErr error
	var seen uint8
	err := scanObject(value, func(key []byte, escaped bool, raw []byte) error {
		if escaped { // rare: compare the unescaped name
			var name string
			if err := json.Unmarshal(append(append([]byte{'"'}, key...), '"'), &name); err != nil {
				return errSyntax
			}
			key = []byte(name)
		}
		bits := memberBit(key)
		if string(key) == idHead {
			bits |= memberID
		}
		if bits == 0 {
			return nil
		}
		if seen&bits != 0 && dupErr == nil {
			dupErr = fmt.Errorf("JSON field %q occurs more than once", key)
		}
		seen |= bits
		var err error
		if bits&memberID != 0 {
			var v []byte
			var found bool
			if v, found, err = lookupPath(raw, idRest); found {
				ev.EventID, err = stringValue(v, idField)
			} else if err == nil {
				ev.EventID = ""
			}
		}
		switch bits &^ memberID {
		case memberAggregateID:
			ev.AggregateID, err = stringValue(raw, "aggregateId")
		case memberType:
			ev.Type, err = stringValue(raw, "type")
		case memberOccurredAt:
			ev.OccurredAt = time.Time{}
			if string(raw) != "null" {
				if err = ev.OccurredAt.UnmarshalJSON(raw); err != nil {
					err = fmt.Errorf("JSON field \"occurredAt\": %w", err)
				}
			}
		case memberPayload:
			ev.Payload = raw
		}
		if errors.Is(err, errDuplicate) {
			if dupErr == nil {
				dupErr = err
			}
		} else if err != nil && fieldErr == nil {
			fieldErr = err // the document must still be valid JSON
		}
		return nil
	})
	if err != nil {
		return nil, newDecodeError(ErrNotJSON, describeNotJSON(value))
	}
	if dupErr != nil {
		return nil, newDecodeError(ErrDuplicateField, dupErr.Error())
	}
	if fieldErr != nil {
		return nil, newDecodeError(ErrBadField, fieldErr.Error())
	}
	if ev.EventID == "" {
		return nil, newDecodeError(ErrNoID, fmt.Sprintf("JSON field %q is missing or empty", idField))
	}
	if err := checkIDs(ev, idField); err != nil {
		return nil, err
	}
	return ev, nil
}

func startsLikeObject(value []byte) bool {
	t := bytes.TrimSpace(value)
	return len(t) > 0 && t[0] == '{'
}

// stringValue decodes a raw JSON string member; null is the empty string.
func stringValue(raw []byte, name string) (string, error) {
	if string(raw) == "null" {
		return "", nil
	}
	if raw[0] != '"' {
		return "", fmt.Errorf("JSON field %q must be a string", name)
	}
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return string(inner), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("JSON field %q: %w", name, err)
	}
	return s, nil
}

func checkIDs(ev *Event, where string) error {
	if len(ev.EventID) > MaxIDLength {
		return newDecodeError(ErrIDTooLong, fmt.Sprintf("%s is %d bytes, at most %d allowed", where, len(ev.EventID), MaxIDLength))
	}
	if len(ev.AggregateID) > MaxIDLength {
		return newDecodeError(ErrIDTooLong, fmt.Sprintf("aggregate ID is %d bytes, at most %d allowed", len(ev.AggregateID), MaxIDLength))
	}
	if !utf8.ValidString(ev.EventID) || !utf8.ValidString(ev.Source) {
		return newDecodeError(ErrBadField, "event ID is not valid UTF-8")
	}
	// The dedup key of a header-mode ID is source NUL id: a NUL inside the
	// source would let ("a\x00b", "c") and ("a", "b\x00c") share one key.
	if strings.IndexByte(ev.Source, 0) >= 0 {
		return newDecodeError(ErrBadField, "the ID's source contains a NUL byte")
	}
	// encoding/json turns a lone surrogate escape ("\ud800") into U+FFFD, so
	// distinct bad IDs would share one dedup key: refuse the character.
	for _, id := range []string{ev.EventID, ev.Source, ev.AggregateID} {
		// U+FFFD is EF BF BD in UTF-8: most IDs have no 0xEF byte, and
		// IndexByte finds that faster than ContainsRune's search.
		if strings.IndexByte(id, 0xef) >= 0 && strings.ContainsRune(id, utf8.RuneError) {
			return newDecodeError(ErrBadField, "ID contains U+FFFD (a lone surrogate escape or a replacement character)")
		}
	}
	return nil
}

func describeNotJSON(value []byte) string {
	const show = 32
	prefix := value
	if len(prefix) > show {
		prefix = prefix[:show]
	}
	return fmt.Sprintf("value is not a JSON object (%d bytes, starting %q)", len(value), prefix)
}

// Envelope is the goka.Codec of JSON events with the ID in "eventId". Emitters,
// load generators and tests use it; the processor reads input through Decoder.
type Envelope struct{}

// Encode marshals an *Event or Event.
func (Envelope) Encode(value any) ([]byte, error) {
	switch ev := value.(type) {
	case *Event:
		return json.Marshal(ev)
	case Event:
		return json.Marshal(&ev)
	default:
		return nil, fmt.Errorf("codecs: Envelope encodes *Event, got %T", value)
	}
}

// Decode parses a JSON event; errors are *DecodeError.
func (Envelope) Decode(data []byte) (any, error) {
	return Decoder{ID: DefaultIDSource()}.Decode(data, nil)
}
