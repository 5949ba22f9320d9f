package processor

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync/atomic"

	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/opt"
	"github.com/syndtr/goleveldb/leveldb/util"

	"github.com/dedupkit/dedup/internal/tablefile"
)

// Key layout in a partition's LevelDB: table records under 'd'+key and
// metadata under 'm:'+name.
const (
	prefixData        = tablefile.DataPrefix
	metaChangelogNext = tablefile.MetaChangelogNext
	metaEntries       = tablefile.MetaEntries
)

// expiryFunc tells the expiry (unix nanos, 0 = never) of a stored value.
type expiryFunc func(value []byte) int64

// store is one partition of the dedup table: LevelDB holding only committed
// data, plus an in-memory overlay of this transaction's writes. Reads see the
// overlay first. Apply writes the overlay and the changelog offset reached in
// one LevelDB batch after the Kafka transaction committed; Drop forgets it
// after an abort. So LevelDB never holds uncommitted data, and its stored
// changelog offset always matches its contents. A key LevelDB cannot hold
// (keys says so) is answered without reading it.
type store struct {
	path   string
	expiry expiryFunc
	db     *leveldb.DB
	// writeBuffer is the memtable size db was opened with.
	writeBuffer int
	writes      storeWrites // what the open and the committing transaction wrote
	entries     int64       // records in LevelDB
	// keys answers "absent" for most first-seen keys without LevelDB
	// (keyfilter.go); nil until the first one is built. rebuild, when not
	// nil, is building the first one or a bigger one, and buildErr is why
	// one failed the store (startKeysBuild).
	keys     *keyFilter
	rebuild  *filterBuild
	pace     *scanPacer // paces the background builds; nil: none
	buildErr atomic.Pointer[error]
	// sweepFrom is the data key the sweeper's next scan starts at (nil:
	// the first record).
	sweepFrom []byte
	// corrupt: LevelDB reported damage; delete the store at close
	// (store_corrupt.go). Set by the loop and the commit goroutine.
	corrupt atomic.Bool
}

// storeWrites are a store's writes that LevelDB does not hold yet, and what
// they read from it.
type storeWrites struct {
	overlay map[string][]byte // nil value: deleted in this transaction
	// sealed is the overlay of the transaction being committed while the
	// next one is processed, and sealedBase its LevelDB reads (store_seal.go);
	// nil when none. Reads see overlay, then sealed, then LevelDB.
	sealed, sealedBase map[string][]byte
	spare, spareBase   map[string][]byte // cleared maps for the next Seal
	// base caches what this transaction read from LevelDB (nil: absent),
	// so Apply need not read a key again to keep the entry count: a
	// first-seen key is looked up once, not twice.
	base map[string][]byte
}

// storeOptions are the LevelDB options of a partition store.
//
// No block cache. With one, goleveldb keeps each table file's index and
// bloom filter blocks in the same LRU as its data blocks, and lookups of
// late duplicates, spread at random over the whole table, evict them: a
// LevelDB hit then re-reads and decompresses the index and filter blocks of
// every table it searches, most of the hit's cost. Without a block cache
// goleveldb pins the index and filter blocks of its open tables instead and
// reads data blocks through the OS page cache: hits are several times
// cheaper, and the worker's resident memory smaller than with the 16 MiB
// cache.
//
// A bloom filter over the table records (tableFilter), because most
// lookups that reach LevelDB are misses (key filter false positives, keys
// a restore writes) and would otherwise search each level. Quarter-size
// memtables while processing, because a worker holds one store per
// partition, goleveldb keeps two per store (the active one and a recycled
// one, each with its skiplist beside it) and the Go heap grows to twice
// what is live before it collects, so the memtable size, times the
// partitions, is a large part of the worker's peak memory. Smaller
// memtables flush and compact more often, a few percent of the worker's CPU
// per event; 1 MiB is the trade. A restore writes a whole changelog at
// once, and at most restoreParallel run at once: it gets goleveldb's
// default size, which writes faster. No compactions triggered by reads
// (go-ethereum turns them off too): every first-seen event is a lookup that
// misses through several table files, so reads would keep triggering
// compactions that cost CPU and save no lookups.
//
// A restore lets restoreL0Tables level-0 tables pile up before LevelDB
// compacts them (goleveldb's default is 4). A changelog's keys come in
// random order, so every level-0 table overlaps all of level 1, and at the
// default each compaction during the restore would rewrite what the ones
// before it wrote: a partition restores with at most one compaction during
// it and one after it, in the background. Writes slow down and stop only
// past that pile (goleveldb's defaults: at 8 and 12 tables), so the first
// commits of a partition just restored do not wait for that compaction.
func storeOptions(writeBuffer int) *opt.Options {
	o := &opt.Options{
		Filter:                 newTableFilter(),
		DisableBlockCache:      true,
		WriteBuffer:            writeBuffer,
		DisableSeeksCompaction: true,
		WriteL0SlowdownTrigger: restoreL0Tables + 8,
		WriteL0PauseTrigger:    restoreL0Tables + 16,
	}
	if writeBuffer == restoreWriteBuffer {
		o.CompactionL0Trigger = restoreL0Tables
	}
	return o
}

const (
	storeWriteBuffer   = 1 << 20 // per store while processing
	restoreWriteBuffer = 4 << 20 // while restoring, restoreParallel stores at most
	restoreL0Tables    = 16      // level-0 tables a restore piles up before LevelDB compacts them
)

// openStore opens a partition store for processing (storeWriteBuffer). It
// does not read the stored keys: its key filter is built in the background
// (startKeysBuild), paced by pace when not nil (scanpace.go), and until it
// is swapped in every lookup reads LevelDB. Scanning the keys here would
// make a restarted worker wait for every scan before its restores start.
func openStore(path string, expiry expiryFunc, pace *scanPacer) (*store, error) {
	s := &store{path: path, expiry: expiry, pace: pace, writes: storeWrites{overlay: map[string][]byte{}, base: map[string][]byte{}}}
	if err := s.open(storeWriteBuffer); err != nil {
		return nil, err
	}
	if err := s.startKeysBuild(newKeyFilter(filterCapacity(s.entries)), nil); err != nil {
		s.db.Close()
		return nil, err
	}
	return s, nil
}

func (s *store) open(writeBuffer int) error {
	db, err := leveldb.OpenFile(s.path, storeOptions(writeBuffer))
	if err != nil {
		return fmt.Errorf("open table store %s: %w", s.path, err)
	}
	s.db, s.writeBuffer = db, writeBuffer
	if s.entries, err = s.meta(metaEntries, 0); err != nil {
		db.Close()
		return err
	}
	return nil
}

// reopen closes and opens LevelDB again with another memtable size; the
// memtable's contents come back from LevelDB's journal, and the key filter
// stays: same data. A key filter build goes on from where it stopped. Only
// between transactions (nothing in the overlay).
func (s *store) reopen(writeBuffer int) error {
	if s.writeBuffer == writeBuffer {
		return nil
	}
	paused := s.pauseBuild()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close table store %s: %w", s.path, err)
	}
	if err := s.open(writeBuffer); err != nil {
		return err
	}
	return s.resumeBuild(paused)
}

// failKeys fails the store's reads and writes with err (the first one
// kept). Called from a key filter build's goroutine.
func (s *store) failKeys(err error) {
	s.noteCorrupt(err)
	s.buildErr.CompareAndSwap(nil, &err)
}

// keysErr is the error a key filter build failed the store with; nil when
// none did.
func (s *store) keysErr() error {
	if e := s.buildErr.Load(); e != nil {
		return *e
	}
	return nil
}

// meta reads an int64 metadata value, def when absent.
func (s *store) meta(name string, def int64) (int64, error) {
	v, err := s.db.Get([]byte(name), nil)
	if errors.Is(err, leveldb.ErrNotFound) {
		return def, nil
	}
	if err != nil {
		return 0, s.noteCorrupt(fmt.Errorf("table store %s: read %s: %w", s.path, name, err))
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("table store %s: bad %s record", s.path, name)
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

func dataKey(key string) []byte { return tablefile.DataKey(key) }

// Expired scans up to scan table records from where its last call stopped
// and returns up to limit of their keys whose expiry is at or before now and
// that this transaction has not touched; the caller re-checks the current
// value before deleting. done reports that the scan reached the last record:
// the next call starts again from the first.
func (s *store) Expired(now int64, limit, scan int) (keys []string, done bool, err error) {
	if err := s.keysErr(); err != nil {
		return nil, false, err
	}
	start := s.sweepFrom
	if start == nil {
		start = []byte{prefixData}
	}
	it := s.db.NewIterator(&util.Range{Start: start, Limit: []byte{prefixData + 1}}, &opt.ReadOptions{DontFillCache: true})
	defer it.Release()
	var last []byte
	for n := 0; n < scan && len(keys) < limit; n++ {
		if !it.Next() {
			s.sweepFrom = nil
			return keys, true, s.noteCorrupt(it.Error())
		}
		last = it.Key()
		if exp := s.expiry(it.Value()); exp <= 0 || exp > now {
			continue
		}
		if !s.touched(string(last[1:])) {
			keys = append(keys, string(last[1:]))
		}
	}
	if last != nil { // resume right after the last record looked at
		s.sweepFrom = append(bytes.Clone(last), 0)
	}
	return keys, false, s.noteCorrupt(it.Error())
}

// Get returns the value of key, or nil when there is none. Once a key
// filter build failed the store (keysErr), it returns that error.
func (s *store) Get(key string) ([]byte, error) {
	if err := s.keysErr(); err != nil {
		return nil, err
	}
	if v, ok := s.writes.overlay[key]; ok {
		return v, nil
	}
	if v, ok := s.writes.sealed[key]; ok {
		return v, nil
	}
	if v, ok := s.writes.base[key]; ok {
		return v, nil
	}
	if !s.keys.mayContain(key) {
		s.writes.base[key] = nil
		return nil, nil
	}
	v, err := s.db.Get(dataKey(key), nil)
	if errors.Is(err, leveldb.ErrNotFound) {
		v, err = nil, nil
	}
	if err == nil {
		s.writes.base[key] = v
	}
	return v, s.noteCorrupt(err)
}

func (s *store) Set(key string, value []byte) { s.writes.overlay[key] = value }
func (s *store) Delete(key string)            { s.writes.overlay[key] = nil }
func (s *store) Dirty() bool                  { return len(s.writes.overlay) > 0 }

// Drop forgets the uncommitted writes, sealed or not, after an abort.
func (s *store) Drop() {
	clear(s.writes.overlay)
	clear(s.writes.base)
	s.dropSealed()
}

// ChangelogNext is the changelog offset to restore from: everything below it
// is in LevelDB. -1 when nothing was stored yet.
func (s *store) ChangelogNext() (int64, error) { return s.meta(metaChangelogNext, -1) }

// Apply writes the overlay and the changelog offset in one batch.
func (s *store) Apply(changelogNext int64) error {
	if err := s.keysErr(); err != nil {
		return err
	}
	delta, err := s.write(s.writes.overlay, s.writes.base, changelogNext)
	if err != nil {
		return err
	}
	s.committed(s.writes.overlay, delta)
	clear(s.writes.overlay)
	clear(s.writes.base)
	s.maintainKeys()
	return nil
}

// write puts layer and the changelog offset into LevelDB in one batch and
// returns the change of the entry count; base holds values the transaction
// read from LevelDB. It reads the store's LevelDB, key filter and entry
// count and writes only LevelDB, so the loop may read the store meanwhile
// (WriteSealed).
func (s *store) write(layer, base map[string][]byte, changelogNext int64) (int64, error) {
	b := new(leveldb.Batch)
	delta := int64(0)
	for _, k := range sortedKeys(layer) {
		v := layer[k]
		dk := dataKey(k)
		old, known := base[k]
		had := known && old != nil
		if !known && s.keys.mayContain(k) {
			_, err := s.db.Get(dk, nil)
			had = err == nil
			if err != nil && !errors.Is(err, leveldb.ErrNotFound) {
				return 0, s.noteCorrupt(err)
			}
		}
		switch {
		case v == nil && had:
			b.Delete(dk)
			delta--
		case v != nil:
			b.Put(dk, v)
			if !had {
				delta++
			}
		}
	}
	if changelogNext >= 0 {
		b.Put([]byte(metaChangelogNext), binary.BigEndian.AppendUint64(nil, uint64(changelogNext)))
	}
	b.Put([]byte(metaEntries), binary.BigEndian.AppendUint64(nil, uint64(s.entries+delta)))
	if err := s.db.Write(b, nil); err != nil {
		return 0, s.noteCorrupt(fmt.Errorf("apply committed transaction to %s: %w", s.path, err))
	}
	return delta, nil
}

// sortedKeys returns layer's keys in order. LevelDB inserts a batch into its
// memtable (a skip list) one record after another; in key order each
// insert walks the nodes the previous one just touched, which are in the CPU
// cache, so a restore of random event IDs takes less CPU with its chunks
// sorted, the sort included (BenchmarkStoreRestore).
func sortedKeys(layer map[string][]byte) []string {
	keys := make([]string, 0, len(layer))
	for k := range layer {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// committed takes the entry count change of a written layer and its stored
// keys into the key filter.
func (s *store) committed(layer map[string][]byte, delta int64) {
	s.entries += delta
	for k, v := range layer {
		if v != nil {
			s.addKey(k)
		}
	}
}

// Wipe deletes every record, for a restore from the start.
func (s *store) Wipe() error {
	s.stopRebuild()
	if err := s.db.Close(); err != nil {
		return err
	}
	if err := os.RemoveAll(s.path); err != nil {
		return err
	}
	s.Drop()
	// Nothing is stored: an empty filter holds every key, with no scan.
	s.keys = newKeyFilter(filterCapacity(0))
	s.buildErr.Store(nil)
	return s.open(s.writeBuffer)
}

// Close stops a key filter build first: its snapshot must be released before
// the DB closes.
func (s *store) Close() error {
	s.stopRebuild()
	return s.db.Close()
}
