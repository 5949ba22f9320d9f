package processor

import (
	"errors"
	"fmt"

	"github.com/lovoo/goka"
)

// partitionTable is one partition of the group table as the member's loop
// sees it: reads go through the store's overlay, writes go to the overlay and
// to the partition's changelog in the open transaction. The member commits
// all of its partitions in one transaction, so a message of one partition
// may write the table of another it owns (engine.LoopContext): the changelog
// record, the output and the input offset still commit or abort together.
type partitionTable struct {
	m     *member
	p     int32
	store *store
}

// ValueOf reads the table record of key (engine.KeyedTable).
func (t *partitionTable) ValueOf(key string) any {
	data, err := t.store.Get(key)
	if err != nil {
		fail(fmt.Errorf("read table partition %d: %w", t.p, err))
	}
	if data == nil {
		return nil
	}
	v, err := t.m.codecs.table.Decode(data)
	if err != nil {
		fail(fmt.Errorf("decode table value of %q: %w", key, err))
	}
	return v
}

// SetValueOf writes the table record of key (engine.KeyedTable).
func (t *partitionTable) SetValueOf(key string, value any) { t.set(key, value, nil) }

func (t *partitionTable) set(key string, value any, headers goka.Headers) {
	if value == nil {
		fail(errors.New("cannot set nil as value"))
	}
	data, err := t.m.codecs.table.Encode(value)
	if err != nil {
		fail(fmt.Errorf("encode table value: %w", err))
	}
	t.store.Set(key, data)
	t.m.queueChangelog(t.p, key, data, saramaHeaders(headers))
}

func (t *partitionTable) delete(key string, headers goka.Headers) {
	t.store.Delete(key)
	t.m.queueChangelog(t.p, key, nil, saramaHeaders(headers))
}

// fail stops the callback with err; the member aborts the transaction.
func fail(err error) { panic(&failure{err: err}) }
