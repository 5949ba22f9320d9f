package processor

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"time"

	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/opt"
	"github.com/syndtr/goleveldb/leveldb/util"

	"github.com/dedupkit/dedup/internal/leveldbx"
)

// keyFilter is a Bloom filter over the keys of one partition store, kept in
// memory in front of LevelDB. Most lookups of a dedup table are misses (every
// first-seen event), and a LevelDB miss is not cheap: it searches both
// memtables and, for each table file that may hold the key (every level-0
// file, one per deeper level), an index block and that file's own filter.
// Without a filter those lookups are a large share of the worker's CPU.
// One hash and a few bit tests answer "certainly absent" for
// all but a few percent of the misses.
//
// Only "absent" is trusted. The store keeps the invariant that every key in
// LevelDB's data range has been added (keyfilter_test.go checks it against
// LevelDB), so a wrong "absent" cannot happen; a wrong "maybe" costs one
// LevelDB lookup. Deleted keys stay in until the filter is rebuilt. A nil
// filter answers "maybe" for every key: a store has none until the scan
// that builds its first one, in the background after the open, ended.
type keyFilter struct {
	seed     maphash.Seed
	bits     []uint64
	nbits    uint64
	added    int // keys added since the filter was made
	capacity int // keys it was sized for
}

const (
	// filterBitsPerKey at capacity, with filterProbes probes: about 2% of
	// the misses pass when it is full. A filter is made for twice the keys
	// it starts with, so it runs between half full (0.2%) and full: 16 bits
	// per stored key right after a build, 20 MB for 10M seen IDs.
	filterBitsPerKey = 8
	filterProbes     = 5
	// filterMinKeys is the smallest capacity (16 KiB).
	filterMinKeys = 1 << 14
)

// newKeyFilter returns an empty filter for about capacity keys.
func newKeyFilter(capacity int) *keyFilter {
	capacity = max(capacity, filterMinKeys)
	words := (capacity*filterBitsPerKey + 63) / 64
	return &keyFilter{seed: maphash.MakeSeed(), bits: make([]uint64, words), nbits: uint64(words) * 64, capacity: capacity}
}

// probe i of a key is h1 + i*h2 (double hashing), mapped onto the bit range
// by a multiply-shift, so the size need not be a power of two.
func (f *keyFilter) add(key string) { f.addHash(maphash.String(f.seed, key)) }

func (f *keyFilter) addHash(h uint64) {
	h1, h2 := h, bits.RotateLeft64(h, 32)|1
	for range filterProbes {
		b, _ := bits.Mul64(h1, f.nbits)
		f.bits[b/64] |= 1 << (b % 64)
		h1 += h2
	}
	f.added++
}

// mayContain is false only for a key that was never added.
func (f *keyFilter) mayContain(key string) bool {
	if f == nil {
		return true
	}
	h := maphash.String(f.seed, key)
	h1, h2 := h, bits.RotateLeft64(h, 32)|1
	for range filterProbes {
		b, _ := bits.Mul64(h1, f.nbits)
		if f.bits[b/64]&(1<<(b%64)) == 0 {
			return false
		}
		h1 += h2
	}
	return true
}

// size is the filter's memory in bytes (0 for none).
func (f *keyFilter) size() int {
	if f == nil {
		return 0
	}
	return 8 * len(f.bits)
}

// keyFilterBytes is the memory of the store's key filters, a build's
// included: it is allocated when the build starts.
func (s *store) keyFilterBytes() int {
	n := s.keys.size()
	if s.rebuild != nil {
		n += s.rebuild.f.size()
	}
	return n
}

// full reports whether more keys were added than the filter was sized for.
func (f *keyFilter) full() bool { return f == nil || f.added > f.capacity }

// filterCapacity is the size of a filter built over n stored keys.
func filterCapacity(n int64) int { return int(2 * max(n, filterMinKeys/2)) }

// buildKeyFilter adds every data key of r (a DB or a snapshot of one) to a
// new filter of the given capacity.
func buildKeyFilter(r leveldb.Reader, capacity int) (*keyFilter, error) {
	f := newKeyFilter(capacity)
	if _, err := scanKeys(r, f, nil, nil, nil); err != nil {
		return nil, err
	}
	return f, nil
}

// scanKeys adds the data keys of r from data key from on (nil: the first)
// to f. stop, when closed, ends it early with errFilterStopped and next, the
// data key to go on from. pace, when not nil, paces the scan (scanpace.go).
// The scan does not fill the block cache: it would evict the blocks
// processing reads for blocks it reads once.
func scanKeys(r leveldb.Reader, f *keyFilter, from []byte, stop <-chan struct{}, pace *scanPacer) (next []byte, err error) {
	if from == nil {
		from = []byte{prefixData}
	}
	if pace != nil {
		if !pace.wait(stop) {
			return from, errFilterStopped
		}
		defer pace.done()
	}
	it := r.NewIterator(&util.Range{Start: from, Limit: []byte{prefixData + 1}}, &opt.ReadOptions{DontFillCache: true})
	defer it.Release()
	chunk := time.Now()
	for n := 0; it.Next(); n++ {
		if pace != nil && n > 0 && n%scanChunk == 0 {
			if !pace.rest(chunk, stop) {
				return bytes.Clone(it.Key()), errFilterStopped
			}
			chunk = time.Now()
		}
		if n%4096 == 0 && stop != nil {
			select {
			case <-stop:
				return bytes.Clone(it.Key()), errFilterStopped
			default:
			}
		}
		f.addHash(maphash.Bytes(f.seed, it.Key()[1:]))
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("build key filter: %w", err)
	}
	return nil, nil
}

var errFilterStopped = errors.New("key filter build stopped")

// filterBuild is a scan filling a key filter on a snapshot, off the
// processing loop: a store's first filter, or a bigger one replacing it.
// Keys the store applies meanwhile may not be in the snapshot: they are kept
// in pending and added to the filter when it is swapped in.
type filterBuild struct {
	f       *keyFilter // the scan's until done
	stored  int64      // stored keys when it started: f holds them when done
	stop    chan struct{}
	done    chan filterResult
	pending []string
}

type filterResult struct {
	err  error
	next []byte // where a stopped scan would go on
}

// startFilterBuild snapshots db and scans it from data key from into f in a
// goroutine, paced by pace when not nil, which calls failed with the error
// of a scan that failed. The caller owns the build: it must either take its
// result or stop it.
func startFilterBuild(db *leveldb.DB, f *keyFilter, from []byte, pace *scanPacer, failed func(error)) (*filterBuild, error) {
	snap, err := db.GetSnapshot()
	if err != nil {
		return nil, fmt.Errorf("key filter snapshot: %w", err)
	}
	b := &filterBuild{f: f, stop: make(chan struct{}), done: make(chan filterResult, 1)}
	go func() {
		next, err := scanKeys(snap, f, from, b.stop, pace)
		snap.Release() // before done: the owner may close the DB next
		if err != nil && err != errFilterStopped {
			failed(err)
		}
		b.done <- filterResult{err, next}
	}()
	return b, nil
}

// halt stops the build and waits for its goroutine; it may have finished
// or failed first.
func (b *filterBuild) halt() filterResult {
	close(b.stop)
	return <-b.done
}

// startKeysBuild starts a scan of the store into f from data key from (nil:
// the first) as s.rebuild. A failed scan of the store's first filter, and
// damage found by any scan, fail the store (keysErr): without a filter
// every key would have to be looked up, and a damaged store must end the
// session to be deleted and restored (store_corrupt.go).
func (s *store) startKeysBuild(f *keyFilter, from []byte) error {
	first := s.keys == nil
	b, err := startFilterBuild(s.db, f, from, s.pace, func(err error) {
		if first || leveldbx.Corrupted(err) {
			s.failKeys(fmt.Errorf("table store %s: %w", s.path, err))
		}
	})
	if err != nil {
		return fmt.Errorf("table store %s: %w", s.path, err)
	}
	b.stored = s.entries
	s.rebuild = b
	return nil
}

// addKey adds a key being written to the filter, and to the build's pending
// keys: the build's snapshot may predate it.
func (s *store) addKey(k string) {
	if s.keys != nil {
		s.keys.add(k)
	}
	if s.rebuild != nil {
		s.rebuild.pending = append(s.rebuild.pending, k)
	}
}

// maintainKeys swaps in a finished build of the key filter, or starts one
// when the filter holds more keys than it was sized for: because the table
// grew, or because keys were deleted and added since it was built. The scan
// runs on a snapshot in a goroutine, so processing never waits for it; the
// old filter, or none while the first one is built, answers meanwhile (more
// often "maybe").
func (s *store) maintainKeys() {
	if b := s.rebuild; b != nil {
		select {
		case r := <-b.done:
			s.rebuild = nil
			s.takeBuild(b, r)
		default:
		}
		return
	}
	if s.keys == nil || !s.keys.full() { // nil: the first build failed (keysErr), or a reopen
		return
	}
	s.startKeysBuild(newKeyFilter(filterCapacity(s.entries)), nil) // on error the old filter stays
}

// takeBuild ends build b, which reported r and is no longer s.rebuild.
func (s *store) takeBuild(b *filterBuild, r filterResult) {
	switch {
	case r.err == nil:
		for _, k := range b.pending {
			b.f.add(k)
		}
		s.keys = b.f
	case s.keys != nil:
		// The old filter still holds every key; try again after as many
		// keys again.
		s.keys.capacity = 2 * s.keys.added
	}
}

// reserveKeys makes the filter big enough for n more keys, so that a restore
// does not rebuild it over and over while the table grows. It scans the
// stored keys once, in the caller's goroutine, unless the filter, or the
// first one being built, has room: the restore of a short tail must not
// scan them (a build in flight takes the restored keys as pending; it
// holds only those the restore writes until it ends, since the restore's
// Apply swaps it in then).
func (s *store) reserveKeys(n int64) error {
	if err := s.keysErr(); err != nil {
		return err
	}
	if s.keys != nil && int64(s.keys.capacity-s.keys.added) >= n {
		return nil
	}
	if b := s.rebuild; s.keys == nil && b != nil && int64(b.f.capacity)-b.stored-int64(len(b.pending)) >= n {
		return nil
	}
	s.stopRebuild()
	f, err := buildKeyFilter(s.db, filterCapacity(s.entries+n))
	if err != nil {
		return s.noteCorrupt(fmt.Errorf("table store %s: %w", s.path, err))
	}
	s.keys = f
	return nil
}

// stopRebuild stops a build, dropping its work.
func (s *store) stopRebuild() {
	if s.rebuild != nil {
		s.rebuild.halt()
		s.rebuild = nil
	}
}

// pauseBuild stops a build so that the DB can be closed, and returns what
// resumeBuild needs to go on where it stopped; nil when there is nothing to
// go on with (no build, or it ended first).
func (s *store) pauseBuild() *pausedBuild {
	b := s.rebuild
	if b == nil {
		return nil
	}
	s.rebuild = nil
	r := b.halt()
	if r.err != errFilterStopped {
		s.takeBuild(b, r)
		return nil
	}
	return &pausedBuild{b: b, next: r.next}
}

type pausedBuild struct {
	b    *filterBuild
	next []byte
}

// resumeBuild goes on with a paused build on the store's DB, which holds
// everything the paused one's snapshot held: the keys it scanned stay in its
// filter, and those the store applied since it started stay pending.
func (s *store) resumeBuild(p *pausedBuild) error {
	if p == nil {
		return nil
	}
	if err := s.startKeysBuild(p.b.f, p.next); err != nil {
		return err
	}
	s.rebuild.stored, s.rebuild.pending = p.b.stored, p.b.pending
	return nil
}
