package processor

import (
	"strconv"
	"testing"
	"time"

	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/cache"
	"github.com/syndtr/goleveldb/leveldb/util"
)

// fillStore commits n seen records and compacts them into table files, so
// that reads go through the block cache (the memtable is not cached).
func fillStore(t *testing.T, s *store, n int) {
	t.Helper()
	v := seenValue(t, time.Now().Add(time.Hour))
	for i := 0; i < n; i++ {
		s.Set("key-"+strconv.Itoa(i), v)
	}
	if err := s.Apply(int64(n)); err != nil {
		t.Fatal(err)
	}
	if err := s.db.CompactRange(util.Range{}); err != nil {
		t.Fatal(err)
	}
}

func readAll(t *testing.T, s *store, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if v, err := s.Get("key-" + strconv.Itoa(i)); err != nil || v == nil {
			t.Fatalf("key-%d: %v, %v", i, v, err)
		}
	}
	s.Drop()
}

// cachedBytes is the size of the blocks a store holds in the block cache.
func cachedBytes(t *testing.T, s *store) int64 {
	t.Helper()
	var st leveldb.DBStats
	if err := s.db.Stats(&st); err != nil {
		t.Fatal(err)
	}
	return st.BlockCache.Size
}

func TestBlockCacheIsOneBudgetForAllStores(t *testing.T) {
	const capacity, records = 64 << 10, 20000 // about 1 MiB of blocks per store
	blocks := newBlockCache(capacity)
	a, err := openStore(t.TempDir(), seenExpiry, blocks)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := openStore(t.TempDir(), seenExpiry, blocks)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	fillStore(t, a, records)
	fillStore(t, b, records)

	readAll(t, a, records)
	if got := cachedBytes(t, a); got == 0 || got > capacity {
		t.Fatalf("after reading a: a caches %d bytes, want 1..%d", got, capacity)
	}
	readAll(t, b, records) // b's blocks push a's out
	ca, cb := cachedBytes(t, a), cachedBytes(t, b)
	if cb == 0 || ca+cb > capacity {
		t.Fatalf("after reading b: a caches %d bytes and b %d, want b > 0 and %d in all at most", ca, cb, capacity)
	}
	if ca >= cb {
		t.Fatalf("a kept %d cached bytes after b read %d: the budget is not shared", ca, cb)
	}
}

// A store removing a table file evicts its blocks of that file; another
// store's file of the same number (namespace) stays cached.
func TestBlockCacheEvictNSKeepsOtherStoresBlocks(t *testing.T) {
	blocks := newBlockCache(1 << 20)
	a, b := cache.NewCache(blocks.New(0)), cache.NewCache(blocks.New(0))
	put := func(c *cache.Cache, ns, key uint64, size int) {
		c.Get(ns, key, func() (int, cache.Value) { return size, "block" }).Release()
	}
	used := func() int64 { return a.GetStats().Size + b.GetStats().Size }
	put(a, 5, 1, 100)
	put(a, 6, 1, 10)
	put(b, 5, 1, 200)
	if got := used(); got != 310 {
		t.Fatalf("cached %d bytes, want 310", got)
	}
	a.EvictNS(5)
	if got := used(); got != 210 {
		t.Fatalf("after a evicted its file 5: %d bytes cached, want 210 (a's file 6, b's file 5)", got)
	}
	if h := b.Get(5, 1, nil); h == nil {
		t.Fatal("b's block of its file 5 was evicted")
	} else {
		h.Release()
	}
	// Over budget: the oldest block goes, whichever store it belongs to.
	put(b, 7, 1, 1<<20-100)
	if h := a.Get(6, 1, nil); h != nil {
		t.Fatal("a's oldest block survived an over-budget insert")
	}
	if got := used(); got > 1<<20 {
		t.Fatalf("%d bytes cached, over the budget of %d", got, 1<<20)
	}
}
