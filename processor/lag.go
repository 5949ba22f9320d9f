package processor

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// lagInterval is how often a claim reports its consumer lag. The lag is
// reported on a timer, not per processed batch, so that it grows with new
// input while the loop is busy with older records.
const lagInterval = time.Second

// claimProgress is how far the loop got in a claimed partition: next, the
// next offset it has yet to take (stored after each batch; the stuck watch
// reads it), and done, the offset before which every event is done, its
// handler call included (stored per event; the lag watcher reads it, so
// that events whose calls still run count as lag).
type claimProgress struct{ next, done atomic.Int64 }

// claimProgress starts a claim's progress at its initial offset. A group
// without a committed offset on the partition starts at sarama's
// OffsetOldest (or Newest), which is not an offset: it is looked up, one
// request per claim, only until the group commits there. Should that fail,
// the lag is reported once the loop processed a batch of the claim.
func (m *member) claimProgress(claim sarama.ConsumerGroupClaim) *claimProgress {
	p := &claimProgress{}
	next := claim.InitialOffset()
	if next < 0 {
		off, err := m.client.GetOffset(claim.Topic(), claim.Partition(), next)
		if err != nil {
			m.log.Warn("consumer lag: looking up the start offset", "topic", claim.Topic(), "partition", claim.Partition(), "err", err)
			off = -1
		}
		next = off
	}
	p.next.Store(next)
	p.done.Store(next)
	return p
}

// watchLag reports the claim's consumer lag every lagInterval until the
// returned function is called, which waits for it to stop. The claim's
// ConsumeClaim owns it, so it has stopped before Cleanup drops the
// partition's series (PartitionRevoked) and never brings them back.
//
// The lag is the claim's HighWaterMarkOffset minus the offset before which
// every event is done (claimProgress.done). sarama takes that offset from each fetch response's high-water
// mark (and from a ListOffsets for the latest offset at the claim's start):
// it is the log end, not the last stable offset, even with read_committed,
// since sarama does not expose the fetch response's last stable offset. So
// records of an open transaction count as lag until they are committed or
// aborted, and so do transaction markers: on a partition written
// transactionally (the loop topic always is) a caught-up member shows a lag
// of 1, the commit marker after the last record, as kafka-consumer-groups.sh
// does. sarama refreshes the mark only when it fetches, which it does while
// the loop drains its buffers; a loop that stopped processing altogether
// freezes it, and dedup_uncommitted_seconds tells that instead.
func (m *member) watchLag(claim sarama.ConsumerGroupClaim, progress *claimProgress) (stop func()) {
	report := func() {
		if done := progress.done.Load(); done >= 0 {
			m.hooks.ConsumerLag(claim.Topic(), claim.Partition(), max(claim.HighWaterMarkOffset()-done, 0))
		}
	}
	report()
	return ticking(lagInterval, report)
}

// ticking runs f every d on a goroutine of its own until the returned
// function is called, which stops it and waits for it: a claim's watchers
// end before its ConsumeClaim returns.
func ticking(d time.Duration, f func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				f()
			case <-done:
				return
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// of sets the claim progress the loop advances past in.
func (in inbound) of(progress *claimProgress) inbound {
	in.progress = progress
	return in
}
