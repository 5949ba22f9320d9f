package processor

import (
	"fmt"
	"time"

	"github.com/dedupkit/dedup/codecs"
	"github.com/dedupkit/dedup/internal/leveldbx"
)

// seenExpiry reads the expiry of a stored seen record; an undecodable value
// never expires (it is left for a human to look at, not silently dropped).
func seenExpiry(value []byte) int64 {
	exp, err := codecs.SeenExpiry(value)
	if err != nil {
		return 0
	}
	return exp
}

// sweepPassIntervals is how many sweep intervals a pass over a partition's
// records is spread over: each sweep scans about that fraction of them, so
// a record is deleted within about an hour (at the default 1m interval)
// after it expired. Until then the table judges it expired anyway (Judge
// reads its expiry): the sweeper only reclaims the space.
const sweepPassIntervals = 60

// sweepScan is how many records one sweep of s scans: a
// sweepPassIntervals-th of them, and at least the deletion batch.
func sweepScan(s *store, batch int) int {
	return max(batch, int(s.entries/sweepPassIntervals)+1)
}

// sweep deletes up to SweepBatch expired records per owned partition, among
// the next records its scan reaches: from the overlay now, and from the
// changelog by tombstones queued in the open transaction, so compaction
// removes them and a restore never brings them back. It runs in the member's
// loop between messages, and its scans and batches are bounded, so it never
// stalls processing for long; it reports whether a partition had more to
// delete (the loop then sweeps again at the next commit).
func (m *member) sweep(now time.Time) (more bool) {
	for p, t := range m.tables.byPartition {
		s := t.store
		keys, _, err := s.Expired(now.UnixNano(), m.cfg.Sweep.Batch, sweepScan(s, m.cfg.Sweep.Batch))
		if err != nil && leveldbx.Corrupted(err) {
			// The store is marked; ending the session deletes it at close
			// and the rejoin restores it (store_corrupt.go).
			m.abort(fmt.Errorf("sweep: partition %d: %w", p, err))
			return false
		}
		if err != nil {
			m.log.Warn("sweep: scanning the table", "partition", p, "err", err)
			continue
		}
		deleted := 0
		for _, k := range keys {
			v, err := s.Get(k)
			if err != nil || v == nil {
				continue
			}
			if exp := seenExpiry(v); exp == 0 || exp > now.UnixNano() {
				continue // re-set since it was scanned
			}
			s.Delete(k)
			m.queueChangelog(p, k, nil)
			deleted++
		}
		if deleted > 0 {
			m.hooks.Swept(p, deleted)
			m.tx.state.dirty = true
		}
		if len(keys) == m.cfg.Sweep.Batch {
			more = true
		}
	}
	return more
}
