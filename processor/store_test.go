package processor

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/syndtr/goleveldb/leveldb"

	"github.com/dedupkit/dedup/codecs"
)

func seenValue(t *testing.T, expires time.Time) []byte {
	t.Helper()
	b, err := (&codecs.SeenRecord{Topic: "in", ExpiresAt: expires}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// reopened closes s and opens its directory again, as a restarted worker
// does.
func reopened(t *testing.T, s *store) *store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := openStore(s.path, seenExpiry, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStoreOverlayAppliesOnlyOnApply(t *testing.T) {
	s, err := openStore(t.TempDir(), seenExpiry, nil)
	if err != nil {
		t.Fatal(err)
	}
	v := seenValue(t, time.Now().Add(time.Hour))
	s.Set("a", v)
	if got, _ := s.Get("a"); string(got) != string(v) {
		t.Fatal("overlay not read first")
	}
	s.Drop()
	if got, _ := s.Get("a"); got != nil {
		t.Fatal("dropped overlay still visible")
	}
	s.Set("a", v)
	s.Set("b", v)
	if err := s.Apply(42); err != nil {
		t.Fatal(err)
	}
	s.Delete("b")
	if err := s.Apply(43); err != nil {
		t.Fatal(err)
	}

	s = reopened(t, s)
	next, _ := s.ChangelogNext()
	if a, _ := s.Get("a"); a == nil || next != 43 || s.entries != 1 {
		t.Fatalf("after reopen: a=%v next=%d entries=%d; want a, 43, 1", a != nil, next, s.entries)
	}
	if b, _ := s.Get("b"); b != nil {
		t.Fatal("deleted key came back")
	}
}

func TestStoreExpiredScansInPasses(t *testing.T) {
	s, err := openStore(t.TempDir(), seenExpiry, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	for i := range 10 { // k0..k9; the even ones expired
		exp := now.Add(time.Hour)
		if i%2 == 0 {
			exp = now.Add(-time.Hour)
		}
		s.Set("k"+strconv.Itoa(i), seenValue(t, exp))
	}
	if err := s.Apply(-1); err != nil {
		t.Fatal(err)
	}
	// A scan of 4 records sees k0..k3; the next one goes on from k4.
	keys, done, err := s.Expired(now.UnixNano(), 10, 4)
	if err != nil || done || !slices.Equal(keys, []string{"k0", "k2"}) {
		t.Fatalf("first scan: %v done=%v err=%v; want [k0 k2], not done", keys, done, err)
	}
	// The batch limit stops a scan early; it resumes after k4.
	if keys, done, _ = s.Expired(now.UnixNano(), 1, 100); done || !slices.Equal(keys, []string{"k4"}) {
		t.Fatalf("limited scan: %v done=%v; want [k4], not done", keys, done)
	}
	// Records this transaction touched are left alone.
	s.Set("k6", seenValue(t, now.Add(time.Hour)))
	if keys, done, _ = s.Expired(now.UnixNano(), 10, 100); !done || !slices.Equal(keys, []string{"k8"}) {
		t.Fatalf("rest of the pass: %v done=%v; want [k8], done", keys, done)
	}
	s.Drop()
	// The next pass starts over; a renewed record is not expired.
	s.Set("k0", seenValue(t, now.Add(time.Hour)))
	if err := s.Apply(-1); err != nil {
		t.Fatal(err)
	}
	if keys, done, _ = s.Expired(now.UnixNano(), 10, 100); !done || !slices.Equal(keys, []string{"k2", "k4", "k6", "k8"}) {
		t.Fatalf("second pass: %v done=%v; want [k2 k4 k6 k8], done", keys, done)
	}
}

func TestStoreWipe(t *testing.T) {
	s, err := openStore(t.TempDir(), seenExpiry, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Set("a", seenValue(t, time.Now()))
	if err := s.Apply(5); err != nil {
		t.Fatal(err)
	}
	if err := s.Wipe(); err != nil {
		t.Fatal(err)
	}
	next, _ := s.ChangelogNext()
	if a, _ := s.Get("a"); a != nil || next != -1 || s.entries != 0 {
		t.Fatalf("wipe left a=%v next=%d entries=%d", a != nil, next, s.entries)
	}
}

func TestInstanceIDIsStable(t *testing.T) {
	dir := t.TempDir()
	a, err := instanceID(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := instanceID(dir)
	if err != nil || a != b || a == "" {
		t.Fatalf("instance id %q then %q (%v)", a, b, err)
	}
}

// TestStoreApplyUsesReadsOfTheTransaction: Apply takes the old value from
// the transaction's own Get instead of reading LevelDB again; the entry count
// and the sweeper's view must come out as if it had read.
func TestStoreApplyUsesReadsOfTheTransaction(t *testing.T) {
	s, err := openStore(t.TempDir(), seenExpiry, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	apply := func() {
		t.Helper()
		if err := s.Apply(-1); err != nil {
			t.Fatal(err)
		}
	}
	// Read (miss) then write, as the callback does for a first-seen key.
	if v, _ := s.Get("k"); v != nil {
		t.Fatal("empty store has k")
	}
	s.Set("k", seenValue(t, now.Add(-time.Hour)))
	apply()
	// A read cached in one transaction must not leak into the next: read k
	// (hit), drop, then re-set k without reading it.
	if v, _ := s.Get("k"); v == nil {
		t.Fatal("k not stored")
	}
	s.Drop()
	s.Set("k", seenValue(t, now.Add(-2*time.Hour)))
	apply()
	// Read (hit) then write with a later expiry.
	if v, _ := s.Get("k"); v == nil {
		t.Fatal("k not stored")
	}
	s.Set("k", seenValue(t, now.Add(time.Hour)))
	s.Get("gone") // a miss that is then deleted: no change to the count
	s.Delete("gone")
	apply()
	if s.entries != 1 {
		t.Fatalf("entries = %d, want 1", s.entries)
	}
	if keys, _, _ := s.Expired(now.UnixNano(), 10, 10); len(keys) != 0 {
		t.Fatalf("expired keys %v after k was renewed, want none", keys)
	}
}

// A restore reopens the store with big memtables and back; committed data,
// the changelog offset and the entry count must survive both (the memtable's
// part comes back from LevelDB's journal).
func TestStoreReopenKeepsCommittedData(t *testing.T) {
	s, err := openStore(t.TempDir(), seenExpiry, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	v := seenValue(t, time.Now().Add(time.Hour))
	s.Set("a", v)
	if err := s.Apply(1); err != nil {
		t.Fatal(err)
	}
	for i, wb := range []int{restoreWriteBuffer, storeWriteBuffer} {
		if err := s.reopen(wb); err != nil {
			t.Fatal(err)
		}
		if s.writeBuffer != wb {
			t.Fatalf("reopen %d: memtable size %d, want %d", i, s.writeBuffer, wb)
		}
		key := "k" + string(rune('b'+i))
		s.Set(key, v)
		if err := s.Apply(int64(i + 2)); err != nil {
			t.Fatal(err)
		}
		next, _ := s.ChangelogNext()
		a, _ := s.Get("a")
		k, _ := s.Get(key)
		if a == nil || k == nil || next != int64(i+2) || s.entries != int64(i+2) {
			t.Fatalf("after reopen %d: a=%v %s=%v next=%d entries=%d", i, a != nil, key, k != nil, next, s.entries)
		}
	}
}

// A restore lets LevelDB's level-0 tables pile up instead of compacting them
// as they come (storeOptions): with a changelog's random keys each
// compaction during the restore rewrote the ones before it. The pile is
// compacted after the restore, in the background. With goleveldb's default
// trigger this restore compacts level 0 during it.
func TestRestoreLeavesCompactionForAfter(t *testing.T) {
	const n = 500000
	s, err := openStore(t.TempDir(), seenExpiry, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	v := seenValue(t, time.Now().Add(time.Hour))
	ids := randomEventIDs(n)
	var during leveldb.DBStats
	got, err := applyChangelog(s, 0, n, func(_, left int64) {
		if left == 0 {
			if err := s.db.Stats(&during); err != nil {
				t.Error(err)
			}
		}
	}, func(fn func(int64, *sarama.Record) error) (int64, error) {
		for off, id := range ids {
			if err := fn(int64(off), &sarama.Record{Key: []byte(id), Value: v}); err != nil {
				return int64(off), err
			}
		}
		return n, nil
	})
	if err != nil || got != n {
		t.Fatalf("restored %d records (%v), want %d", got, err, n)
	}
	if during.Level0Comp != 0 || during.LevelTablesCounts[0] <= storeOptions(storeWriteBuffer).GetCompactionL0Trigger() {
		t.Fatalf("at the restore's end: %d level-0 compactions, %d level-0 tables; want none, and more tables than the trigger",
			during.Level0Comp, during.LevelTablesCounts[0])
	}
	awaitCompactions(t, s) // the pile is compacted after the restore
	if s.entries != n {
		t.Fatalf("%d entries, want %d", s.entries, n)
	}
	for _, id := range ids[:1000] {
		if got, err := s.Get(id); err != nil || got == nil {
			t.Fatalf("%s after the compaction: %v, %v", id, got, err)
		}
	}
}
