// Package resources holds the stores outside Kafka (a database's
// transaction) that join a runtime member's Kafka transactions: a handler
// joins one through its context (dedup.JoinResource), and the runtime
// commits every joined one just before its Kafka commit and rolls them
// back when its transaction aborts.
package resources

import (
	"context"
	"errors"
	"sync"
)

// Resource is dedup.Resource: the same methods, declared here so that the
// runtimes need not import the root package for it.
type Resource interface {
	Commit(ctx context.Context) error
	Rollback()
}

// Set is the resources joined to one member's transactions in one group
// session. Handlers join from any goroutine; the runtime commits and rolls
// back from its own.
type Set struct {
	mu     sync.Mutex
	byKey  map[any]Resource
	joined []Resource // in the order joined: the order they commit
}

// New returns an empty set.
func New() *Set { return &Set{byKey: map[any]Resource{}} }

type setKey struct{}

// With returns ctx carrying s, for the handlers a runtime runs under it.
func With(ctx context.Context, s *Set) context.Context { return context.WithValue(ctx, setKey{}, s) }

// From is the set ctx carries, or nil.
func From(ctx context.Context) *Set {
	s, _ := ctx.Value(setKey{}).(*Set)
	return s
}

// Join returns the resource key names, made by open the first time.
func (s *Set) Join(key any, open func() (Resource, error)) (Resource, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.byKey[key]; ok {
		return r, nil
	}
	r, err := open()
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, errors.New("resource: open returned nil")
	}
	s.byKey[key] = r
	s.joined = append(s.joined, r)
	return r, nil
}

// Commit commits every joined resource in the order joined and stops at
// the first error: the Kafka transaction must then abort.
func (s *Set) Commit(ctx context.Context) error {
	if s == nil {
		return nil
	}
	for _, r := range s.list() {
		if err := r.Commit(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Rollback rolls every joined resource back.
func (s *Set) Rollback() {
	if s == nil {
		return
	}
	for _, r := range s.list() {
		r.Rollback()
	}
}

func (s *Set) list() []Resource {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Resource(nil), s.joined...)
}
