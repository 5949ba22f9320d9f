package processor

import (
	"time"

	"github.com/dedupkit/dedup/codecs"
)

// seenExpiry reads the expiry of a stored seen record; an undecodable value
// never expires (it is left for a human to look at, not silently dropped).
func seenExpiry(value []byte) int64 {
	var r codecs.SeenRecord
	if r.UnmarshalBinary(value) != nil || r.ExpiresAt.IsZero() {
		return 0
	}
	return r.ExpiresAt.UnixNano()
}

// sweep deletes up to SweepBatch expired records per owned partition: from
// the overlay now, and from the changelog by tombstones queued in the open
// transaction, so compaction removes them and a restore never brings them
// back. It runs in the member's loop between messages, and its batches are
// bounded, so it never stalls processing; it reports whether a partition had
// more to delete (the loop then sweeps again at the next commit).
func (m *member) sweep(now time.Time) (more bool) {
	for p, s := range m.stores {
		keys, err := s.Expired(now.UnixNano(), m.cfg.SweepBatch)
		if err != nil {
			m.log.Warn("sweep: reading the expiry index", "partition", p, "err", err)
			continue
		}
		deleted := 0
		for _, k := range keys {
			v, err := s.Get(k)
			if err != nil || v == nil {
				continue
			}
			if exp := seenExpiry(v); exp == 0 || exp > now.UnixNano() {
				continue // re-set since it was indexed
			}
			s.Delete(k)
			m.queueChangelog(p, k, nil, nil)
			deleted++
		}
		if deleted > 0 {
			m.hooks.Swept(p, deleted)
			m.txn.dirty = true
		}
		if len(keys) == m.cfg.SweepBatch {
			more = true
		}
	}
	return more
}
