package processor

import (
	"strconv"
	"testing"
	"time"

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

func TestBlockCacheIsOneBudgetForAllStores(t *testing.T) {
	const capacity, records = 64 << 10, 20000 // about 1 MiB of blocks per store
	blocks := newBlockCache(capacity)
	a, err := openStore(t.TempDir(), seenExpiry, blocks)
	if err != nil {
		t.Fatal(err)
	}
	b, err := openStore(t.TempDir(), seenExpiry, blocks)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	fillStore(t, a, records)
	fillStore(t, b, records)

	readAll(t, a, records)
	readAll(t, b, records) // b's blocks are the newest
	used := blocks.Used()
	if used == 0 || used > capacity {
		t.Fatalf("after reading both stores: %d bytes cached, want 1..%d", used, capacity)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if got := blocks.Used(); got == 0 {
		t.Fatal("closing one store evicted the other store's blocks")
	}
	readAll(t, b, records) // still readable through the shared cache
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := blocks.Used(); got != 0 {
		t.Fatalf("%d bytes still cached after every store closed", got)
	}
}

func TestBlockCacheEvictNSKeepsOtherStoresFiles(t *testing.T) {
	blocks := newBlockCache(1 << 20)
	a, b := cache.NewCache(blocks.New(0)), cache.NewCache(blocks.New(0))
	put := func(c *cache.Cache, ns, key uint64, size int) {
		c.Get(ns, key, func() (int, cache.Value) { return size, "block" }).Release()
	}
	// Both stores have a table file number 5; a compaction in a removed
	// its file 5.
	put(a, 5, 1, 100)
	put(a, 6, 1, 10)
	put(b, 5, 1, 200)
	if got := blocks.Used(); got != 310 {
		t.Fatalf("used %d, want 310", got)
	}
	a.EvictNS(5)
	if got := blocks.Used(); got != 210 {
		t.Fatalf("after a evicted its file 5: used %d, want 210 (a's file 6, b's file 5)", got)
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
	if got := blocks.Used(); got > 1<<20 {
		t.Fatalf("used %d over the budget of %d", got, 1<<20)
	}
}
