package codecs

import "errors"

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
	ErrBadSeen        = errors.New("malformed seen record")
	ErrSeenVersion    = errors.New("unknown seen record version")
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

var reasons = []struct {
	err   error
	label string
}{
	{ErrNullValue, "null-value"},
	{ErrEmptyValue, "empty-value"},
	{ErrNotJSON, "not-json"},
	{ErrBadField, "bad-field"},
	{ErrNoID, "no-id"},
	{ErrDuplicateField, "duplicate-field"},
	{ErrIDTooLong, "id-too-long"},
	{ErrBadSeen, "bad-seen-record"},
	{ErrSeenVersion, "bad-seen-record"},
}

// Reason returns a stable, low-cardinality label for a decode error, or
// "other" for errors that are not decode errors.
func Reason(err error) string {
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.label
		}
	}
	return "other"
}
