package processor

import (
	"fmt"

	"github.com/dedupkit/dedup/codecs"
)

// partitionTable is one partition of the group table as the member's loop
// sees it: reads go through the store's overlay, writes go to the overlay and
// to the partition's changelog in the open transaction. The member commits
// all of its partitions in one transaction, so a message of one partition
// may write the table of another it owns (txnContext.LoopTable): the
// changelog record, the output and the input offset still commit or abort
// together.
type partitionTable struct {
	m     *member
	p     int32
	store *store
}

// Get reads the table record of key (engine.Table).
func (t *partitionTable) Get(key string) (*codecs.SeenRecord, error) {
	data, err := t.store.Get(key)
	if err != nil {
		return nil, fmt.Errorf("read table partition %d: %w", t.p, err)
	}
	if data == nil {
		return nil, nil
	}
	rec := new(codecs.SeenRecord)
	if err := rec.UnmarshalBinary(data); err != nil {
		return nil, fmt.Errorf("decode table value of %q: %w", key, err)
	}
	return rec, nil
}

// Set writes the table record of key (engine.Table).
func (t *partitionTable) Set(key string, rec *codecs.SeenRecord) error {
	data, err := rec.MarshalBinary()
	if err != nil {
		return fmt.Errorf("encode table value of %q: %w", key, err)
	}
	t.store.Set(key, data)
	t.m.queueChangelog(t.p, key, data)
	return nil
}
