package processor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dedupkit/dedup"
)

// fakeResource counts its commits and rollbacks; fail makes Commit fail.
type fakeResource struct {
	mu                 sync.Mutex
	commits, rollbacks int
	fail               error
}

func (r *fakeResource) Commit(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.commits++
	return r.fail
}

func (r *fakeResource) Rollback() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rollbacks++
}

func (r *fakeResource) counts() (int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.commits, r.rollbacks
}

type resourceKey struct{}

// joining is a forward handler that joins res to its transaction.
func joining(res *fakeResource) dedup.Handler {
	return dedup.HandlerFunc(func(ctx context.Context, ev *dedup.Event) ([]dedup.Message, error) {
		if _, err := dedup.JoinResource(ctx, resourceKey{}, func() (dedup.Resource, error) { return res, nil }); err != nil {
			return nil, err
		}
		return dedup.Forward().Handle(ctx, ev)
	})
}

// The resources a handler joined commit before the Kafka transaction, and
// one that fails to commit aborts it.
func TestResourcesCommitJustBeforeKafka(t *testing.T) {
	prod := newCommitProducer(t)
	m := newTestMember(t, prod, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)
	res := &fakeResource{}
	m.topo.Handler = joining(res)
	sess := commitSession{benchSession{ctx: t.Context()}}
	awaitCommitTxn := func() chan error {
		t.Helper()
		select {
		case answer := <-prod.commits:
			return answer
		case <-time.After(10 * time.Second):
			t.Fatal("no CommitTxn")
			return nil
		}
	}

	handleNow(m, sess, prepared(m, inputMessage(m.topo, 1)))
	m.commit(sess)
	answer := awaitCommitTxn()
	if c, _ := res.counts(); c != 1 {
		t.Fatalf("the resource committed %d times when CommitTxn was called, want 1", c)
	}
	answer <- nil
	m.awaitCommit()
	if m.tx.failed {
		t.Fatal("the transaction failed")
	}

	res.fail = errors.New("database went away")
	handleNow(m, sess, prepared(m, inputMessage(m.topo, 2)))
	m.commit(sess)
	m.awaitCommit()
	select {
	case <-prod.commits:
		t.Fatal("CommitTxn after the resource failed to commit")
	default:
	}
	if !m.tx.failed || prod.aborted != 1 {
		t.Fatalf("after the resource failed: failed %v, %d aborts; want true, 1", m.tx.failed, prod.aborted)
	}
}

// A handler error wrapping dedup.ErrInterrupted while the session goes on
// aborts the transaction: the event is neither dead-lettered nor marked.
func TestHandlerAsksForTheAbort(t *testing.T) {
	prod := newCommitProducer(t)
	m := newTestMember(t, prod, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)
	m.topo.Handler = dedup.HandlerFunc(func(context.Context, *dedup.Event) ([]dedup.Message, error) {
		return nil, fmt.Errorf("%w: database connection lost", dedup.ErrInterrupted)
	})
	sess := commitSession{benchSession{ctx: t.Context()}}
	handleNow(m, sess, prepared(m, inputMessage(m.topo, 1)))
	if !m.tx.failed || prod.aborted != 1 {
		t.Fatalf("failed %v, %d aborts; want the transaction aborted once", m.tx.failed, prod.aborted)
	}
	if got := prod.outputs(); len(got) != 0 {
		t.Fatalf("outputs %v, want none", got)
	}
	for p, pt := range m.tables.byPartition {
		if pt.store.Dirty() {
			t.Fatalf("partition %d: the event's seen mark is still held", p)
		}
	}
}
