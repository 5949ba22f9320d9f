package wire

import (
	"errors"

	"github.com/dedupkit/dedup/codecs"
)

// Sentinels for why a record could not be decoded. Callers branch on them
// with errors.Is; Reason turns them into the short label used in the
// dead-letter header and the metrics.
var (
	ErrNullValue  = errors.New("null value")
	ErrEmptyValue = errors.New("empty value")
	ErrNotJSON    = errors.New("not JSON")
	ErrBadField   = errors.New("field has the wrong type or format")
	ErrNoID       = errors.New("no event ID")
	// ErrDuplicateField: a member the decoder reads (the ID, a step of its
	// path, aggregateId, type, occurredAt, payload) or the ID header occurs
	// twice with different values. Parsers disagree on which one counts, so
	// the record is refused rather than judged by a guess.
	ErrDuplicateField = errors.New("field occurs twice")
	ErrIDTooLong      = errors.New("ID too long")
)

// DecodeError says what is wrong with a record.
type DecodeError struct {
	Kind   error  // one of the sentinels above
	Detail string // human-readable specifics
}

func newDecodeError(kind error, detail string) *DecodeError {
	return &DecodeError{Kind: kind, Detail: detail}
}

func (e *DecodeError) Error() string { return e.Kind.Error() + ": " + e.Detail }

// Unwrap lets errors.Is match the sentinel.
func (e *DecodeError) Unwrap() error { return e.Kind }

// ReasonOther is Reason's label for an error that is not a decode error
// (one a custom decoder returns, for example).
const ReasonOther = "other"

var reasons = []struct {
	err   error
	label string
	input bool // a Decoder returns it for an input record
}{
	{ErrNullValue, "null-value", true},
	{ErrEmptyValue, "empty-value", true},
	{ErrNotJSON, "not-json", true},
	{ErrBadField, "bad-field", true},
	{ErrNoID, "no-id", true},
	{ErrDuplicateField, "duplicate-field", true},
	{ErrIDTooLong, "id-too-long", true},
	{codecs.ErrBadSeen, "bad-seen-record", false},
	{codecs.ErrSeenVersion, "bad-seen-record", false},
}

// InputReasons returns every label Reason gives an error of decoding an
// input record: those of the decode errors above and ReasonOther.
func InputReasons() []string {
	var labels []string
	for _, r := range reasons {
		if r.input {
			labels = append(labels, r.label)
		}
	}
	return append(labels, ReasonOther)
}

// Reason returns a stable, low-cardinality label for a decode error, or
// "other" for errors that are not decode errors.
func Reason(err error) string {
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.label
		}
	}
	return ReasonOther
}
