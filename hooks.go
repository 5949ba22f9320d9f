package dedup

import "time"

// Hook observes what a topology does with its records: a hook is any value
// that implements one or more of the Hook interfaces of this package
// (HookProcessed, HookSkipped, ...), and a runtime tells it only the events
// it implements. New events come as new interfaces, so a hook written today
// keeps compiling. Hooks are called from every partition's goroutine: they
// must be safe for concurrent use and return quickly. The runtime's own
// events (transactions, rebalances, lag) are processor.Hook's.
type Hook any

// HookProcessed is told that a first-seen event was handled and marked;
// latency is from the record's timestamp to then.
type HookProcessed interface {
	OnProcessed(partition int32, latency time.Duration)
}

// HookSkipped is told of a duplicate within the retention: nothing was
// emitted.
type HookSkipped interface{ OnSkipped(partition int32) }

// HookExpired is told of an event whose key was seen but whose seen record
// had expired: it was processed again.
type HookExpired interface{ OnExpired(partition int32) }

// HookTooOld is told of an unseen event older than the retention, which the
// table cannot judge (Topology.StaleEvents says what happened to it).
type HookTooOld interface{ OnTooOld(partition int32) }

// HookDeadLettered is told that a record went to the dead-letter topic for
// reason (DeadLetterReasons lists them).
type HookDeadLettered interface{ OnDeadLettered(reason string) }

// HookHandlerError is told of one failed handler attempt.
type HookHandlerError interface{ OnHandlerError() }

// HookRekeyed is told that an event was looped to the partition of its
// dedup key. The exactly-once runtime judges an event whose dedup key's
// partition the same member owns at once, without telling this.
type HookRekeyed interface{ OnRekeyed() }

// Hooks adds hooks to the topology; see Hook.
func Hooks(hooks ...Hook) Option {
	return func(t *Topology) { t.Hooks = append(t.Hooks, hooks...) }
}
