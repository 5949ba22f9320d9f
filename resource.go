package dedup

import (
	"context"
	"errors"

	"github.com/dedupkit/dedup/internal/resources"
)

// A Resource is a store outside Kafka, a database transaction, that commits
// with the runtime's Kafka transactions: the runtime commits it just before
// each Kafka commit and rolls it back when the Kafka transaction aborts.
// Kafka and the resource still commit one after the other, not atomically:
// a crash between the two leaves the resource committed and the Kafka
// transaction aborted, so the events come again. A Resource makes that
// harmless by remembering what it committed for each event (package inbox
// keeps an inbox table with the event's returned messages).
type Resource interface {
	// Commit commits what the resource holds; an error aborts the Kafka
	// transaction. The runtime calls it from one goroutine at a time, but
	// handlers may use the resource meanwhile: Commit must wait for them.
	Commit(ctx context.Context) error
	// Rollback drops what the resource holds and is not committed.
	Rollback()
}

// ErrNoResources is JoinResource's error for a context that is not a
// handler's of a runtime that commits resources.
var ErrNoResources = errors.New("dedup: the handler's runtime does not commit resources with its Kafka transactions")

// JoinResource returns the Resource that key names in the transactions of
// the runtime member running the handler whose context is ctx, made by open
// the first time. key is compared with ==; use a value of a type of your own
// package, as for context keys. One member's handlers share one resource;
// another member (another thread, instance or session) gets its own.
func JoinResource(ctx context.Context, key any, open func() (Resource, error)) (Resource, error) {
	s := resources.From(ctx)
	if s == nil {
		return nil, ErrNoResources
	}
	r, err := s.Join(key, func() (resources.Resource, error) {
		r, err := open()
		if r == nil {
			return nil, err
		}
		return r, err
	})
	if err != nil {
		return nil, err
	}
	return r.(Resource), nil
}
