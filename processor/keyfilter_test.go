package processor

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/iterator"
	"github.com/syndtr/goleveldb/leveldb/opt"
	"github.com/syndtr/goleveldb/leveldb/util"
)

func TestKeyFilterHasNoFalseAbsent(t *testing.T) {
	tests := []struct {
		name     string
		capacity int
		keys     int
		maxMaybe float64 // share of never-added keys answered "maybe"
	}{
		{"half full", 100_000, 50_000, 0.005},
		{"full", 100_000, 100_000, 0.04},
		{"twice over", 20_000, 40_000, 0.40}, // still correct, just useless
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newKeyFilter(tt.capacity)
			for i := range tt.keys {
				f.add(fmt.Sprintf("event-%d", i))
			}
			for i := range tt.keys {
				if k := fmt.Sprintf("event-%d", i); !f.mayContain(k) {
					t.Fatalf("added key %s answered absent", k)
				}
			}
			maybe := 0
			const probes = 100_000
			for i := range probes {
				if f.mayContain(fmt.Sprintf("other-%d", i)) {
					maybe++
				}
			}
			if share := float64(maybe) / probes; share > tt.maxMaybe {
				t.Fatalf("%.2f%% of absent keys answered maybe, want at most %.2f%%", 100*share, 100*tt.maxMaybe)
			}
			if full := tt.keys > max(tt.capacity, filterMinKeys); f.full() != full {
				t.Fatalf("full() = %v, want %v", f.full(), full)
			}
		})
	}
	var none *keyFilter
	if !none.mayContain("x") {
		t.Fatal("a nil filter must answer maybe")
	}
}

// requireFilterHoldsStore fails unless every data key in the store's LevelDB
// is in its key filter: the invariant that makes "absent" safe to trust.
func requireFilterHoldsStore(t *testing.T, s *store) {
	t.Helper()
	if s.keys == nil {
		t.Fatal("the store has no key filter")
	}
	it := s.db.NewIterator(util.BytesPrefix([]byte{prefixData}), nil)
	defer it.Release()
	n := 0
	for it.Next() {
		if k := string(it.Key()[1:]); !s.keys.mayContain(k) {
			t.Fatalf("stored key %q is not in the key filter", k)
		}
		n++
	}
	if int64(n) != s.entries {
		t.Fatalf("%d stored keys, entries says %d", n, s.entries)
	}
}

// awaitKeys waits for the store's key filter build to end and lets
// maintainKeys take it, as the next Apply would.
func awaitKeys(t *testing.T, s *store) {
	t.Helper()
	b := s.rebuild
	if b == nil {
		return
	}
	r := <-b.done
	b.done <- r
	s.maintainKeys()
	if s.rebuild == b {
		t.Fatal("maintainKeys did not take the finished build")
	}
}

// TestStoreKeyFilterFollowsTheTable grows a store past its filter's size,
// so that rebuilds run while transactions apply, deletes and re-adds keys,
// reopens it and wipes it; at every step each stored key must be in the
// filter, and Get must find it.
func TestStoreKeyFilterFollowsTheTable(t *testing.T) {
	s, err := openStore(t.TempDir(), seenExpiry, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	awaitKeys(t, s) // the first filter, of an empty store: not one of the rebuilds counted below
	v := seenValue(t, time.Now().Add(time.Hour))
	apply := func(from, to int, set bool) {
		t.Helper()
		for i := from; i < to; i++ {
			if k := fmt.Sprintf("k%d", i); set {
				s.Set(k, v)
			} else {
				s.Delete(k)
			}
		}
		if err := s.Apply(-1); err != nil {
			t.Fatal(err)
		}
	}
	const batch = 1000
	rebuilds := 0
	for i := 0; i < 4*filterMinKeys; i += batch {
		before := s.keys
		apply(i, i+batch, true)
		if s.keys != before {
			rebuilds++
		}
	}
	if rebuilds == 0 && s.rebuild == nil {
		t.Fatalf("no rebuild started after %d keys (capacity %d)", 4*filterMinKeys, s.keys.capacity)
	}
	requireFilterHoldsStore(t, s)

	// A rebuild in flight while keys are applied: they are not in its
	// snapshot, so they must come in through its pending list.
	s.stopRebuild()
	if err := s.startKeysBuild(newKeyFilter(filterCapacity(s.entries)), nil); err != nil {
		t.Fatal(err)
	}
	b := s.rebuild
	apply(100_000, 100_000+batch, true)
	awaitKeys(t, s)
	if s.rebuild != nil || s.keys != b.f {
		t.Fatal("finished rebuild was not swapped in")
	}
	requireFilterHoldsStore(t, s)
	for i := 100_000; i < 100_000+batch; i++ {
		if got, _ := s.Get(fmt.Sprintf("k%d", i)); got == nil {
			t.Fatalf("k%d applied during the rebuild is not found", i)
		}
		s.Drop()
	}

	apply(0, 2*batch, false)
	apply(batch, 2*batch, true)
	requireFilterHoldsStore(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = openStore(s.path, seenExpiry, nil); err != nil {
		t.Fatal(err)
	}
	awaitKeys(t, s)
	requireFilterHoldsStore(t, s)
	if got, _ := s.Get("k1500"); got == nil {
		t.Fatal("k1500 not found after reopen")
	}
	if got, _ := s.Get("k500"); got != nil {
		t.Fatal("deleted k500 found after reopen")
	}

	if err := s.reserveKeys(1_000_000); err != nil {
		t.Fatal(err)
	}
	if s.keys.capacity < 1_000_000 {
		t.Fatalf("reserveKeys(1M): capacity %d", s.keys.capacity)
	}
	requireFilterHoldsStore(t, s)
	if err := s.Wipe(); err != nil {
		t.Fatal(err)
	}
	if s.keys.added != 0 || s.keys.mayContain("k1500") {
		t.Fatal("wiped store kept its filter")
	}
	requireFilterHoldsStore(t, s)
}

// Opening a store does not read its keys: its key filter is built by a scan
// in the background, while lookups read LevelDB. Keys applied meanwhile are
// not in the scan's snapshot and must come in through its pending list.
func TestOpenBuildsTheKeyFilterInTheBackground(t *testing.T) {
	const n = 20_000
	s, err := openStore(storeOnDisk(t, n), seenExpiry, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := s.rebuild
	if s.keys != nil || b == nil {
		t.Fatalf("after open: key filter %p, build %p; want no filter and a build in flight", s.keys, b)
	}
	for _, i := range []int{0, n / 2, n - 1} {
		if v, err := s.Get(fmt.Sprintf("id-%05d", i)); err != nil || v == nil {
			t.Fatalf("Get(id-%05d) while the filter is built: %v, %v", i, v, err)
		}
	}
	if v, err := s.Get("absent"); err != nil || v != nil {
		t.Fatalf("Get(absent) while the filter is built: %q, %v", v, err)
	}
	s.Drop()

	v := seenValue(t, time.Now().Add(time.Hour))
	const applied = 1000
	for i := range applied {
		s.Set(fmt.Sprintf("new-%d", i), v)
	}
	if err := s.Apply(n + 1); err != nil {
		t.Fatal(err)
	}
	awaitKeys(t, s)
	if s.keys != b.f {
		t.Fatal("the build's filter was not swapped in")
	}
	if len(b.pending) != applied {
		t.Fatalf("%d keys pending in the build, want the %d applied while it ran", len(b.pending), applied)
	}
	requireFilterHoldsStore(t, s)
	maybe := 0
	for i := range 10_000 {
		if s.keys.mayContain(fmt.Sprintf("other-%d", i)) {
			maybe++
		}
	}
	if maybe > 200 {
		t.Fatalf("%d of 10000 never stored keys answered maybe: the filter does not filter", maybe)
	}
}

// A restore into a store whose first filter is being built: a tail the
// build has room for goes into its pending keys, without a scan of the
// stored keys before the restore; more than that is worth a scan, which
// reserveKeys does at once, into a filter sized for them.
func TestReserveKeysWhileTheFirstFilterIsBuilt(t *testing.T) {
	const n, tail = 20_000, 100
	s, err := openStore(storeOnDisk(t, n), seenExpiry, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := s.rebuild
	v := seenValue(t, time.Now().Add(time.Hour))
	restore := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			s.Set(fmt.Sprintf("restored-%d", i), v)
		}
		if err := s.Apply(int64(n + to)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.reserveKeys(tail); err != nil {
		t.Fatal(err)
	}
	if s.keys != nil || s.rebuild != b {
		t.Fatalf("reserveKeys(%d) with the first filter being built: filter %p, build %p (was %p); want no scan", tail, s.keys, s.rebuild, b)
	}
	restore(0, tail)

	// The build was sized for twice the stored keys; the tail took some
	// of the room, whether the build is still pending or swapped in.
	room := int64(filterCapacity(n) - n - tail)
	if err := s.reserveKeys(room); err != nil {
		t.Fatal(err)
	}
	if (s.keys != nil && s.keys != b.f) || (s.rebuild != nil && s.rebuild != b) {
		t.Fatalf("reserveKeys(%d), the room left: filter %p, build %p; want build %p's", room, s.keys, s.rebuild, b)
	}
	if err := s.reserveKeys(room + 1); err != nil {
		t.Fatal(err)
	}
	if s.keys == nil || s.keys == b.f || s.rebuild != nil || int64(s.keys.capacity) < n+tail+room+1 {
		t.Fatalf("reserveKeys(%d), past the room: filter %p (build's %p), build %p; want a new filter scanned for them", room+1, s.keys, b.f, s.rebuild)
	}
	restore(tail, tail+int(room)+1)
	if s.rebuild != nil {
		t.Fatal("a rebuild started during a restore the filter was sized for")
	}
	requireFilterHoldsStore(t, s)
}

// Reopening a store (a restore changes its memtable size) while its first
// filter is built goes on with the build; keys applied before and after
// are in the filter that is swapped in.
func TestReopenWhileTheFirstFilterIsBuilt(t *testing.T) {
	const n = 20_000
	s, err := openStore(storeOnDisk(t, n), seenExpiry, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	v := seenValue(t, time.Now().Add(time.Hour))
	for i, wb := range []int{restoreWriteBuffer, storeWriteBuffer} {
		s.Set(fmt.Sprintf("before-reopen-%d", i), v)
		if err := s.Apply(int64(n + i)); err != nil {
			t.Fatal(err)
		}
		if err := s.reopen(wb); err != nil {
			t.Fatal(err)
		}
		if s.keys == nil && s.rebuild == nil {
			t.Fatal("the reopen dropped the key filter build")
		}
	}
	s.Set("after-reopen", v)
	if err := s.Apply(n + 2); err != nil {
		t.Fatal(err)
	}
	awaitKeys(t, s)
	requireFilterHoldsStore(t, s)
	// Each key once: a build started over on the reopened store would
	// scan the keys applied before the reopen (they sort before id-*) on
	// top of taking them as pending.
	if s.keys.added != n+3 {
		t.Fatalf("the filter took %d keys, want %d: each stored key once", s.keys.added, n+3)
	}
}

// stopAfter is a DB whose iterators close stop after k keys.
type stopAfter struct {
	*leveldb.DB
	k    int
	stop chan struct{}
}

func (r *stopAfter) NewIterator(slice *util.Range, ro *opt.ReadOptions) iterator.Iterator {
	return &stoppingIterator{Iterator: r.DB.NewIterator(slice, ro), r: r}
}

type stoppingIterator struct {
	iterator.Iterator
	r *stopAfter
	n int
}

func (it *stoppingIterator) Next() bool {
	if it.n++; it.n == it.r.k {
		close(it.r.stop)
	}
	return it.Iterator.Next()
}

// A stopped scan reports where it stopped, and one from there adds the rest:
// every key once, none skipped (what a reopen relies on); paced or not, and
// stopped in a rest between two chunks too.
func TestScanKeysGoesOnWhereItStopped(t *testing.T) {
	const n = 3*scanChunk + 100
	for _, tc := range []struct {
		name   string
		stopAt int
		pace   *scanPacer
	}{
		{"unpaced", 5000, nil},
		{"paced, stopped within a chunk", 5000, newScanPacer()},
		{"paced, stopped in a rest", scanChunk, newScanPacer()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := unscannedStore(t, n)
			f := newKeyFilter(filterCapacity(n))
			stop := make(chan struct{})
			next, err := scanKeys(&stopAfter{DB: s.db, k: tc.stopAt, stop: stop}, f, nil, stop, tc.pace)
			if err != errFilterStopped || f.added == 0 || f.added >= n {
				t.Fatalf("stopped scan: %v after %d keys; want errFilterStopped part way", err, f.added)
			}
			if want := dataKey(fmt.Sprintf("id-%05d", f.added)); !bytes.Equal(next, want) {
				t.Fatalf("stopped after %d keys at %q, want %q", f.added, next, want)
			}
			if next, err = scanKeys(s.db, f, next, nil, tc.pace); err != nil || next != nil {
				t.Fatalf("resumed scan: next %q, %v", next, err)
			}
			if f.added != n {
				t.Fatalf("%d keys added, want %d", f.added, n)
			}
			if tc.pace != nil && len(tc.pace.turn) != 0 {
				t.Fatal("the scans ended without giving the turn back")
			}
			s.keys = f
			requireFilterHoldsStore(t, s)
		})
	}
}

// unscannedStore is a store of n keys on disk whose own key filter build
// was stopped, for a test to scan it.
func unscannedStore(t *testing.T, n int) *store {
	t.Helper()
	s, err := openStore(storeOnDisk(t, n), seenExpiry, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	s.stopRebuild()
	return s
}

// A paced scan does not read a key while another scan holds the turn or a
// member holds the builds (back from a rebalance, not committed since), and
// one stopped while it waits goes on from where it would have started.
func TestPacedScanWaitsForItsTurn(t *testing.T) {
	const n = 1000
	for _, tc := range []struct {
		name           string
		block, unblock func(p *scanPacer)
	}{
		{"another scan's turn", func(p *scanPacer) { p.turn <- struct{}{} }, (*scanPacer).done},
		{"a member holds the builds", (*scanPacer).hold, (*scanPacer).release},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := unscannedStore(t, n)
			pace := newScanPacer()
			tc.block(pace)
			f := newKeyFilter(filterCapacity(n))
			stop := make(chan struct{})
			result := make(chan error, 1)
			var next []byte
			go func() {
				var err error
				next, err = scanKeys(s.db, f, nil, stop, pace)
				result <- err
			}()
			close(stop)
			if err := <-result; err != errFilterStopped || f.added != 0 {
				t.Fatalf("scan stopped while waiting: %v, %d keys added; want errFilterStopped and none", err, f.added)
			}
			tc.unblock(pace)
			if _, err := scanKeys(s.db, f, next, nil, pace); err != nil || f.added != n {
				t.Fatalf("scan from %q once unblocked: %v, %d keys added, want %d", next, err, f.added, n)
			}
		})
	}
}

// Closing or wiping a store while its first filter is built stops the
// build before LevelDB closes (its snapshot must be released first); the
// build's goroutine must not outlive the store nor touch it afterwards.
func TestCloseWhileTheFirstFilterIsBuilt(t *testing.T) {
	path := storeOnDisk(t, 50_000)
	goroutines := runtime.NumGoroutine()
	for range 5 {
		s, err := openStore(path, seenExpiry, nil)
		if err != nil {
			t.Fatal(err)
		}
		b := s.rebuild
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-b.stop:
		default:
			t.Fatal("Close did not stop the key filter build")
		}
		if s.rebuild != nil || s.keysErr() != nil {
			t.Fatalf("after Close: build %p, error %v", s.rebuild, s.keysErr())
		}
	}

	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > goroutines && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > goroutines {
		t.Fatalf("%d goroutines, %d before the stores were opened and closed", g, goroutines)
	}

	s, err := openStore(path, seenExpiry, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Wipe(); err != nil {
		t.Fatal(err)
	}
	if s.rebuild != nil || s.keys == nil || s.entries != 0 {
		t.Fatalf("after Wipe: build %p, filter %p, %d entries; want an empty filter and no build", s.rebuild, s.keys, s.entries)
	}
	if v, err := s.Get("id-00001"); v != nil || err != nil {
		t.Fatalf("Get after Wipe: %q, %v", v, err)
	}
	requireFilterHoldsStore(t, s)
}
