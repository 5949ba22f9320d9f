package processor

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// benchStore opens a store holding n committed seen records keyed key-<i>.
func benchStore(b *testing.B, n int) *store {
	b.Helper()
	s, err := openStore(b.TempDir(), seenExpiry, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	v := benchSeenValue(b)
	for i := 0; i < n; i++ {
		s.Set("key-"+strconv.Itoa(i), v)
		if (i+1)%10000 == 0 {
			if err := s.Apply(int64(i)); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := s.Apply(int64(n)); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkStoreGet is the table lookup of the per-message path: the
// uncommitted overlay first, then LevelDB.
func BenchmarkStoreGet(b *testing.B) {
	const committed = 100000
	s := benchStore(b, committed)
	v, _ := s.Get("key-1")
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i*97%committed)
	}
	b.Run("overlay-hit", func(b *testing.B) {
		for _, k := range keys {
			s.Set("new-"+k, v)
		}
		defer s.Drop()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if got, _ := s.Get("new-" + keys[i%len(keys)]); got == nil {
				b.Fatal("overlay miss")
			}
			i++
		}
	})
	// The store remembers a transaction's reads until Apply or Drop; drop
	// them after each pass over the keys, so that LevelDB is what is read.
	b.Run("leveldb-hit", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if got, _ := s.Get(keys[i%len(keys)]); got == nil {
				b.Fatal("miss")
			}
			if i++; i%len(keys) == 0 {
				s.Drop()
			}
		}
	})
	b.Run("miss", func(b *testing.B) { // a first-seen event: overlay miss, LevelDB miss
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if got, _ := s.Get("absent-" + keys[i%len(keys)]); got != nil {
				b.Fatal("hit")
			}
			if i++; i%len(keys) == 0 {
				s.Drop()
			}
		}
	})
}

// BenchmarkStoreApply writes a committed transaction's overlay of 1000 new
// records (data, counters) to LevelDB: per op, one record.
func BenchmarkStoreApply(b *testing.B) {
	s := benchStore(b, 0)
	v := benchSeenValue(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s.Set("key-"+strconv.Itoa(i), v)
		i++
		if i%1000 == 0 {
			if err := s.Apply(int64(i)); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkStoresGet looks up seen keys at random over the 12 stores of a
// worker holding 12 partitions: late duplicates, which LevelDB answers from
// table files spread over the whole key range.
func BenchmarkStoresGet(b *testing.B) {
	const stores, committed = 12, 100000
	ss := make([]*store, stores)
	for i := range ss {
		ss[i] = benchStore(b, committed)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		s := ss[i%stores]
		if got, _ := s.Get("key-" + strconv.Itoa(rng.IntN(committed))); got == nil {
			b.Fatal("miss")
		}
		if i%1024 == 0 {
			s.Drop()
		}
	}
}

// BenchmarkKeyFilterBuild is the scan that builds a store's key filter, in
// the background, when a worker opens a partition it already holds on disk
// (after a restart), per stored key; and the filter's own cost per lookup.
func BenchmarkKeyFilterBuild(b *testing.B) {
	const n = 200_000
	s := benchStore(b, n)
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			if _, err := buildKeyFilter(s.db, filterCapacity(n)); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
	})
	b.Run("mayContain", func(b *testing.B) {
		keys := make([]string, 1024)
		for i := range keys {
			keys[i] = "absent-" + strconv.Itoa(i)
		}
		i := 0
		for b.Loop() {
			s.keys.mayContain(keys[i%len(keys)])
			i++
		}
	})
}

// BenchmarkStoreOpen is a worker opening a partition it holds on disk
// (after a restart), with 200k seen IDs: "open" until openStore returns,
// when the partition's restore can start; "filter" until its key filter is
// in place as well (the first Apply after the background scan ended).
func BenchmarkStoreOpen(b *testing.B) {
	const n = 200_000
	bs := benchStore(b, n)
	if err := bs.Close(); err != nil {
		b.Fatal(err)
	}
	path := bs.path
	open := func(b *testing.B) *store {
		s, err := openStore(path, seenExpiry, nil)
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	open(b).Close() // the journal goes to a table file once, not in the loop
	b.Run("open", func(b *testing.B) {
		for b.Loop() {
			s := open(b)
			b.StopTimer()
			s.Close()
			b.StartTimer()
		}
	})
	b.Run("filter", func(b *testing.B) {
		for b.Loop() {
			s := open(b)
			if fb := s.rebuild; fb != nil {
				r := <-fb.done
				fb.done <- r
			}
			s.maintainKeys()
			if s.keys == nil {
				b.Fatal("no key filter after its build ended")
			}
			b.StopTimer()
			s.Close()
			b.StartTimer()
		}
	})
}

// BenchmarkSweepScan is the sweeper's scan per stored record (none of them
// expired): what a pass over a partition costs, spread over
// sweepPassIntervals sweeps.
func BenchmarkSweepScan(b *testing.B) {
	const committed, scan = 100000, 1000
	s := benchStore(b, committed)
	now := time.Now().UnixNano()
	b.ReportAllocs()
	for b.Loop() {
		if keys, _, err := s.Expired(now, scan, scan); err != nil || len(keys) != 0 {
			b.Fatalf("expired %v, err %v", keys, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*scan), "ns/record")
}
