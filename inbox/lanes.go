package inbox

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"

	"github.com/dedupkit/dedup"
)

// lanes are one runtime member's database transactions, Config.Lanes of
// them: the dedup.Resource the member commits just before each Kafka
// commit. A member's handler calls (dedup.Concurrency) work in them side by
// side, each event in the lane of its record key, so that the events of one
// key (one account, say) meet in one transaction and never wait for each
// other's locks across lanes.
type lanes struct {
	seed maphash.Seed
	all  []*batch
}

func (ib *Inbox) newLanes() *lanes {
	l := &lanes{seed: maphash.MakeSeed(), all: make([]*batch, ib.cfg.Lanes)}
	for i := range l.all {
		l.all[i] = &batch{ib: ib}
	}
	return l
}

// of is the lane of ev: its record key's, or its event ID's when it has none.
func (l *lanes) of(ev *dedup.Event) *batch {
	if len(l.all) == 1 {
		return l.all[0]
	}
	key := ev.Key
	if key == "" {
		key = ev.EventID
	}
	return l.all[maphash.String(l.seed, key)%uint64(len(l.all))]
}

// Commit commits every lane, all at once: a lane's event may wait for a row
// another lane's open transaction holds, and a commit of one lane after the
// other would then wait for it forever.
func (l *lanes) Commit(ctx context.Context) error {
	if len(l.all) == 1 {
		return l.all[0].Commit(ctx)
	}
	errs := make([]error, len(l.all))
	var wg sync.WaitGroup
	for i, b := range l.all {
		wg.Go(func() { errs[i] = b.Commit(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Rollback rolls every lane back.
func (l *lanes) Rollback() {
	for _, b := range l.all {
		b.Rollback()
	}
}
