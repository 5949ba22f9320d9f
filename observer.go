package dedup

import "time"

// Observer receives the dedup outcomes of a topology. It is the hook the
// metrics package implements; a nil Observer in Topology means NopObserver.
// Implementations must be safe for concurrent use (one call per message,
// from every partition's goroutine).
type Observer interface {
	// Processed: a first-seen event was handled and marked, latency from the
	// record timestamp to the end of the callback.
	Processed(partition int32, latency time.Duration)
	// Skipped: a duplicate within the retention, nothing emitted.
	Skipped(partition int32)
	// Expired: the key was seen but its record had expired; processed again.
	Expired(partition int32)
	// TooOld: an unseen event older than the retention (cannot be judged).
	TooOld(partition int32)
	// DeadLettered: the record went to the dead-letter topic for reason.
	DeadLettered(reason string)
	// HandlerError: one failed handler attempt.
	HandlerError()
	// Rekeyed: the event was looped to the partition of its dedup key. The
	// exactly-once runtime judges at once, without counting here, an event
	// whose dedup key's partition the same member owns.
	Rekeyed()
}

// NopObserver ignores everything; embed it to implement part of Observer.
type NopObserver struct{}

func (NopObserver) Processed(int32, time.Duration) {}
func (NopObserver) Skipped(int32)                  {}
func (NopObserver) Expired(int32)                  {}
func (NopObserver) TooOld(int32)                   {}
func (NopObserver) DeadLettered(string)            {}
func (NopObserver) HandlerError()                  {}
func (NopObserver) Rekeyed()                       {}
