package processor

import (
	"errors"
	"fmt"
	"slices"

	"github.com/syndtr/goleveldb/leveldb"

	"github.com/dedupkit/dedup/internal/tablefile"
)

// lookup searches key in every partition this process holds. A key is
// stored in the partition its record was processed on, which for records
// keyed by their dedup key is the producer's choice, so every owned partition
// is asked (a LevelDB read each).
func (p *Processor) lookup(key string) (tablefile.Lookup, error) {
	res := tablefile.Lookup{Key: key}
	for _, m := range p.members {
		m.tables.mu.RLock()
		for part, t := range m.tables.byPartition {
			res.Owned = append(res.Owned, part)
			if res.Found {
				continue
			}
			v, err := t.store.db.Get(dataKey(key), nil)
			if err == nil {
				res.Found, res.Partition, res.Value = true, part, v
			} else if !errors.Is(err, leveldb.ErrNotFound) {
				m.tables.mu.RUnlock()
				return res, fmt.Errorf("partition %d: %w", part, err)
			}
		}
		m.tables.mu.RUnlock()
	}
	slices.Sort(res.Owned)
	return res, nil
}
