package dedup

import "github.com/dedupkit/dedup/internal/wire"

// DeadLetterReasons returns every dlq-reason the worker writes: the labels
// of records that cannot be decoded (not-json, no-id, duplicate-field, ...)
// and the Reason constants. The metrics export dedup_dead_lettered_total at 0 for each from
// the start, so the first dead letter of a reason is an increase an alert sees.
func DeadLetterReasons() []string {
	return append(wire.InputReasons(),
		ReasonNoAggregateID,
		ReasonNoRecordKey,
		ReasonBadLoopRecord,
		ReasonHandlerError,
		ReasonHandlerPermanent,
		ReasonHandlerPanic,
		ReasonBadOutput,
		ReasonTooLarge,
		ReasonTooOld,
	)
}
