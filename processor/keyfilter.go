package processor

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"

	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/opt"
	"github.com/syndtr/goleveldb/leveldb/util"
)

// keyFilter is a Bloom filter over the keys of one partition store, kept in
// memory in front of LevelDB. Most lookups of a dedup table are misses (every
// first-seen event), and a LevelDB miss is not cheap: it searches both
// memtables and, for each table file that may hold the key (every level-0
// file, one per deeper level), an index block and that file's own filter.
// In the profile of a 1M-event run those lookups were a fifth of the
// worker's CPU. One hash and a few bit tests answer "certainly absent" for
// all but a few percent of the misses.
//
// Only "absent" is trusted. The store keeps the invariant that every key in
// LevelDB's data range has been added (keyfilter_test.go checks it against
// LevelDB), so a wrong "absent" cannot happen; a wrong "maybe" costs one
// LevelDB lookup. Deleted keys stay in until the filter is rebuilt. A nil
// filter answers "maybe" for every key.
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

// full reports whether more keys were added than the filter was sized for.
func (f *keyFilter) full() bool { return f == nil || f.added > f.capacity }

// filterCapacity is the size of a filter built over n stored keys.
func filterCapacity(n int64) int { return int(2 * max(n, filterMinKeys/2)) }

// buildKeyFilter adds every data key of r (a DB or a snapshot of one) to a
// new filter of the given capacity. stop, when closed, ends it early with
// errFilterStopped. The scan does not fill the block cache: it would evict
// the blocks processing reads for blocks it reads once.
func buildKeyFilter(r leveldb.Reader, capacity int, stop <-chan struct{}) (*keyFilter, error) {
	f := newKeyFilter(capacity)
	it := r.NewIterator(util.BytesPrefix([]byte{prefixData}), &opt.ReadOptions{DontFillCache: true})
	defer it.Release()
	for n := 0; it.Next(); n++ {
		if n%4096 == 0 && stop != nil {
			select {
			case <-stop:
				return nil, errFilterStopped
			default:
			}
		}
		f.addHash(maphash.Bytes(f.seed, it.Key()[1:]))
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("build key filter: %w", err)
	}
	return f, nil
}

var errFilterStopped = errors.New("key filter build stopped")

// filterBuild is a rebuild running on a snapshot, off the processing loop.
// Keys the store applies meanwhile are not in the snapshot: they are kept in
// pending and added to the new filter when it is swapped in.
type filterBuild struct {
	stop    chan struct{}
	done    chan filterResult
	pending []string
}

type filterResult struct {
	f   *keyFilter
	err error
}

// startFilterBuild snapshots db and scans it in a goroutine. The caller
// owns the build: it must either take its result or stop it.
func startFilterBuild(db *leveldb.DB, capacity int) (*filterBuild, error) {
	snap, err := db.GetSnapshot()
	if err != nil {
		return nil, fmt.Errorf("key filter snapshot: %w", err)
	}
	b := &filterBuild{stop: make(chan struct{}), done: make(chan filterResult, 1)}
	go func() {
		f, err := buildKeyFilter(snap, capacity, b.stop)
		snap.Release() // before done: the owner may close the DB next
		b.done <- filterResult{f, err}
	}()
	return b, nil
}

// cancel stops the build and waits for its goroutine.
func (b *filterBuild) cancel() {
	close(b.stop)
	<-b.done
}

// addKey adds a key being written to the filter, and to the rebuild's
// pending keys: the rebuild's snapshot may predate it.
func (s *store) addKey(k string) {
	if s.keys != nil {
		s.keys.add(k)
	}
	if s.rebuild != nil {
		s.rebuild.pending = append(s.rebuild.pending, k)
	}
}

// maintainKeys swaps in a finished rebuild of the key filter, or starts one
// when the filter holds more keys than it was sized for: because the table
// grew, or because keys were deleted and added since it was built. The scan
// runs on a snapshot in a goroutine, so processing never waits for it; the
// old filter answers meanwhile (a little more often "maybe").
func (s *store) maintainKeys() {
	if b := s.rebuild; b != nil {
		select {
		case r := <-b.done:
			s.rebuild = nil
			if r.err != nil {
				// The old filter still holds every key; try again after
				// as many keys again.
				s.keys.capacity = 2 * s.keys.added
				return
			}
			for _, k := range b.pending {
				r.f.add(k)
			}
			s.keys = r.f
		default:
		}
		return
	}
	if !s.keys.full() {
		return
	}
	if b, err := startFilterBuild(s.db, filterCapacity(s.entries)); err == nil {
		s.rebuild = b
	}
}

// reserveKeys makes the filter big enough for n more keys, so that a restore
// does not rebuild it over and over while the table grows. It scans the
// stored keys once, in the caller's goroutine, unless the filter has room:
// a kept store's restore of a short tail must not scan them (a background
// rebuild may go on; it takes the restored keys as pending).
func (s *store) reserveKeys(n int64) error {
	if s.keys != nil && int64(s.keys.capacity-s.keys.added) >= n {
		return nil
	}
	s.stopRebuild()
	f, err := buildKeyFilter(s.db, filterCapacity(s.entries+n), nil)
	if err != nil {
		return fmt.Errorf("table store %s: %w", s.path, err)
	}
	s.keys = f
	return nil
}

func (s *store) stopRebuild() {
	if s.rebuild != nil {
		s.rebuild.cancel()
		s.rebuild = nil
	}
}
