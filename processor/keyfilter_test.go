package processor

import (
	"fmt"
	"testing"
	"time"

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

// TestStoreKeyFilterFollowsTheTable grows a store past its filter's size,
// so that rebuilds run while transactions apply, deletes and re-adds keys,
// reopens it and wipes it; at every step each stored key must be in the
// filter, and Get must find it.
func TestStoreKeyFilterFollowsTheTable(t *testing.T) {
	s, err := openStore(t.TempDir(), seenExpiry)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
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
	b, err := startFilterBuild(s.db, filterCapacity(s.entries))
	if err != nil {
		t.Fatal(err)
	}
	s.rebuild = b
	apply(100_000, 100_000+batch, true)
	r := <-b.done // wait for the scan, then let maintainKeys take it
	b.done <- r
	s.maintainKeys()
	if s.rebuild != nil || s.keys != r.f {
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
	if s, err = openStore(s.path, seenExpiry); err != nil {
		t.Fatal(err)
	}
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
