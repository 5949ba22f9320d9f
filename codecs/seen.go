// Package codecs is the format of the dedup table: the goka codec Seen and
// the record it decodes, SeenRecord. A goka View of the group table
// "<group>-table" reads it with this codec (see the root package's docs).
package codecs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// seenVersion1 is the first layout of a seen record. A new layout gets a new
// version byte so records written by an older worker stay readable after an
// upgrade (the changelog outlives any one binary).
const seenVersion1 byte = 1

// SeenRecord is the value stored in the dedup table for each processed key.
// Source topic/partition/offset and the processing time are kept for
// tracing ("where did we see this first?"), not for the dedup decision.
type SeenRecord struct {
	FirstProcessed time.Time // when the worker first processed the key
	EventTime      time.Time // occurredAt of the event, or the record timestamp
	AggregateID    string
	Topic          string
	Partition      int32
	Offset         int64
	ExpiresAt      time.Time // after this the record no longer counts
}

// Expired reports whether the record has passed its expiry at now.
func (r *SeenRecord) Expired(now time.Time) bool {
	return !r.ExpiresAt.IsZero() && !now.Before(r.ExpiresAt)
}

// MarshalBinary encodes the record as: version byte, then varint unix-nano
// times, length-prefixed strings and varint numbers. Zero times encode as 0.
func (r *SeenRecord) MarshalBinary() ([]byte, error) {
	buf := make([]byte, 0, 1+5*binary.MaxVarintLen64+len(r.AggregateID)+len(r.Topic)+2*binary.MaxVarintLen32)
	buf = append(buf, seenVersion1)
	buf = binary.AppendVarint(buf, unixNano(r.FirstProcessed))
	buf = binary.AppendVarint(buf, unixNano(r.EventTime))
	buf = binary.AppendUvarint(buf, uint64(len(r.AggregateID)))
	buf = append(buf, r.AggregateID...)
	buf = binary.AppendUvarint(buf, uint64(len(r.Topic)))
	buf = append(buf, r.Topic...)
	buf = binary.AppendVarint(buf, int64(r.Partition))
	buf = binary.AppendVarint(buf, r.Offset)
	buf = binary.AppendVarint(buf, unixNano(r.ExpiresAt))
	return buf, nil
}

// UnmarshalBinary decodes MarshalBinary's output. Errors wrap ErrBadSeen or
// ErrSeenVersion; it never panics on garbage.
func (r *SeenRecord) UnmarshalBinary(data []byte) error {
	f, err := parseSeen(data)
	if err != nil {
		return err
	}
	*r = SeenRecord{
		FirstProcessed: fromUnixNano(f.first),
		EventTime:      fromUnixNano(f.event),
		AggregateID:    string(f.agg),
		Topic:          string(f.topic),
		Partition:      int32(f.part),
		Offset:         f.off,
		ExpiresAt:      fromUnixNano(f.exp),
	}
	return nil
}

// SeenExpiry reads only the expiry of an encoded seen record (unix nanos, 0
// for none), without allocating: the sweeper reads it for every record it
// scans. It accepts and rejects exactly what UnmarshalBinary does.
func SeenExpiry(data []byte) (int64, error) {
	f, err := parseSeen(data)
	return f.exp, err
}

// seenFields are the fields of an encoded seen record, strings still
// pointing into it.
type seenFields struct {
	first, event, part, off, exp int64
	agg, topic                   []byte
}

// parseSeen validates data and splits it into its fields.
func parseSeen(data []byte) (seenFields, error) {
	var f seenFields
	if len(data) == 0 {
		return f, seenError(ErrBadSeen, "empty")
	}
	if data[0] != seenVersion1 {
		return f, seenError(ErrSeenVersion, fmt.Sprintf("version %d", data[0]))
	}
	rd := reader{buf: data[1:]}
	f.first = rd.varint("firstProcessed")
	f.event = rd.varint("eventTime")
	f.agg = rd.bytes("aggregateId")
	f.topic = rd.bytes("topic")
	f.part = rd.varint("partition")
	f.off = rd.varint("offset")
	f.exp = rd.varint("expiresAt")
	if rd.err != nil {
		return seenFields{}, rd.err
	}
	if len(rd.buf) != 0 {
		return seenFields{}, seenError(ErrBadSeen, fmt.Sprintf("%d trailing bytes", len(rd.buf)))
	}
	if f.part < -1<<31 || f.part > 1<<31-1 {
		return seenFields{}, seenError(ErrBadSeen, "partition out of range")
	}
	return f, nil
}

type reader struct {
	buf []byte
	err error
}

func (r *reader) varint(field string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.buf)
	if n <= 0 {
		r.err = seenError(ErrBadSeen, "truncated or overlong "+field)
		return 0
	}
	r.buf = r.buf[n:]
	return v
}

// bytes reads a length-prefixed string, still pointing into the buffer.
func (r *reader) bytes(field string) []byte {
	if r.err != nil {
		return nil
	}
	l, n := binary.Uvarint(r.buf)
	if n <= 0 || l > uint64(len(r.buf)-n) {
		r.err = seenError(ErrBadSeen, "truncated "+field)
		return nil
	}
	b := r.buf[n : n+int(l)]
	r.buf = r.buf[n+int(l):]
	return b
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// Seen is the goka.Codec of the dedup table's values.
type Seen struct{}

// Encode accepts a *SeenRecord or SeenRecord.
func (Seen) Encode(value any) ([]byte, error) {
	switch r := value.(type) {
	case *SeenRecord:
		return r.MarshalBinary()
	case SeenRecord:
		return r.MarshalBinary()
	default:
		return nil, fmt.Errorf("codecs: Seen encodes *SeenRecord, got %T", value)
	}
}

// Decode returns a *SeenRecord.
func (Seen) Decode(data []byte) (any, error) {
	r := new(SeenRecord)
	if err := r.UnmarshalBinary(data); err != nil {
		return nil, err
	}
	return r, nil
}

// The errors UnmarshalBinary wraps.
var (
	ErrBadSeen     = errors.New("malformed seen record")
	ErrSeenVersion = errors.New("unknown seen record version")
)

func seenError(kind error, detail string) error { return fmt.Errorf("%w: %s", kind, detail) }
