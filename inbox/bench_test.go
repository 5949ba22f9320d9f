package inbox_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/inbox"
)

// BenchmarkHandle is one member's events through the inbox with a business
// upsert each, committed every 1000 events: the database's side of a
// member's throughput (the Kafka side is the runtime's benchmarks').
func BenchmarkHandle(b *testing.B) {
	f := newBenchFixture(b)
	h := f.ib.Handler(func(ctx context.Context, tx *inbox.Tx, ev *dedup.Event) ([]dedup.Message, error) {
		_, err := tx.ExecContext(ctx, "INSERT INTO "+f.ledger+" VALUES ($1, 1) ON CONFLICT (event_id) DO UPDATE SET amount = "+f.ledger+".amount + 1", "acct-"+ev.EventID[max(0, len(ev.EventID)-2):])
		return []dedup.Message{{Key: ev.EventID, Value: []byte("v")}}, err
	})
	m := newBenchMember(b)
	b.ResetTimer()
	for i := range b.N {
		if _, err := h.Handle(m.ctx, event("e"+strconv.Itoa(i))); err != nil {
			b.Fatal(err)
		}
		if i%1000 == 999 {
			if err := m.set.Commit(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := m.set.Commit(context.Background()); err != nil {
		b.Fatal(err)
	}
}
