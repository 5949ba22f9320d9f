// Package faults lets the project's tests stop a runtime at a chosen point,
// as a crash there would, through the context they start it with: the
// public configuration carries no fault hooks.
package faults

import "context"

type beforeCommitKey struct{}

// WithBeforeCommit returns ctx carrying fn. A runtime built with it (the
// exactly-once processor, a re-drive) calls fn after a transaction's records
// were sent and before its offsets and commit; an error makes it stop dead
// there, as if the process crashed.
func WithBeforeCommit(ctx context.Context, fn func() error) context.Context {
	return context.WithValue(ctx, beforeCommitKey{}, fn)
}

// BeforeCommit is the fn ctx carries, or nil.
func BeforeCommit(ctx context.Context) func() error {
	fn, _ := ctx.Value(beforeCommitKey{}).(func() error)
	return fn
}

type afterResourcesKey struct{}

// WithAfterResources returns ctx carrying fn. The exactly-once processor
// calls it after the resources joined to a transaction (dedup.Resource)
// committed and before the Kafka commit: the window where a crash leaves
// a database committed and its Kafka transaction aborted. An error makes
// the member stop dead there.
func WithAfterResources(ctx context.Context, fn func() error) context.Context {
	return context.WithValue(ctx, afterResourcesKey{}, fn)
}

// AfterResources is the fn ctx carries, or nil.
func AfterResources(ctx context.Context) func() error {
	fn, _ := ctx.Value(afterResourcesKey{}).(func() error)
	return fn
}

type afterCommitKey struct{}

// WithAfterCommit returns ctx carrying fn. The exactly-once processor calls
// it once a transaction committed in Kafka, before the stores take it: a
// crash there must lose nothing, whatever the transaction held. An error
// makes the member stop dead there.
func WithAfterCommit(ctx context.Context, fn func() error) context.Context {
	return context.WithValue(ctx, afterCommitKey{}, fn)
}

// AfterCommit is the fn ctx carries, or nil.
func AfterCommit(ctx context.Context) func() error {
	fn, _ := ctx.Value(afterCommitKey{}).(func() error)
	return fn
}
