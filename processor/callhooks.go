package processor

import "time"

// CallHooks is told of a member's handler calls (calls.go). A Hooks that
// implements it too is told (metrics.Runtime does); it stands apart from
// Hooks so that adding it changed no implementer of Hooks.
type CallHooks interface {
	// CallStarted: a handler call started; CallEnded: it returned, however
	// it ended, after took (its retries and their backoff included).
	// Their difference is the calls in flight.
	CallStarted()
	CallEnded(took time.Duration)
	// KeyWaited: a record waited took for a call of its dedup key (or its
	// record key, under OrderByRecordKey) to end, and the records behind
	// it with it.
	KeyWaited(took time.Duration)
}

// callHooksOf is h's CallHooks, or one that does nothing.
func callHooksOf(h Hooks) CallHooks {
	if ch, ok := h.(CallHooks); ok {
		return ch
	}
	return nopCallHooks{}
}

type nopCallHooks struct{}

func (nopCallHooks) CallStarted()            {}
func (nopCallHooks) CallEnded(time.Duration) {}
func (nopCallHooks) KeyWaited(time.Duration) {}
