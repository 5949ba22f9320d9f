package processor

import (
	"encoding/hex"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/dedupkit/dedup/codecs"
)

// BenchmarkStoreRestore writes a changelog partition of 800,000 distinct
// random event IDs into an empty store the way readChangelog does: what a
// takeover without a standby, or a newcomer's warm-up, spends on LevelDB.
// Per op, one whole restore; ns/record is its wall time per record and
// cpu-ns/record the process's CPU per record, LevelDB's compactions
// included. Reading the changelog from Kafka adds about 0.3 µs of CPU per
// record on top.
func BenchmarkStoreRestore(b *testing.B) {
	const ids = 800000
	v, err := (&codecs.SeenRecord{Topic: "orders", AggregateID: "order-1", ExpiresAt: time.Now().Add(time.Hour)}).MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([]string, ids)
	for i := range keys {
		var id [16]byte
		for j := range id {
			id[j] = byte(rng.Uint32())
		}
		keys[i] = hex.EncodeToString(id[:])
	}
	var cpu time.Duration
	b.ResetTimer()
	for b.Loop() {
		s, err := openStore(b.TempDir(), seenExpiry, nil)
		if err != nil {
			b.Fatal(err)
		}
		before := cpuTime()
		if err := s.reopen(restoreWriteBuffer); err != nil {
			b.Fatal(err)
		}
		if err := s.reserveKeys(ids); err != nil {
			b.Fatal(err)
		}
		var chunk, chunkBytes int
		for i, k := range keys {
			s.Set(k, v)
			chunk++
			if chunkBytes += len(k) + len(v); chunk == restoreChunk || chunkBytes >= restoreChunkBytes {
				if err := s.Apply(int64(i + 1)); err != nil {
					b.Fatal(err)
				}
				chunk, chunkBytes = 0, 0
			}
		}
		if err := s.Apply(ids); err != nil {
			b.Fatal(err)
		}
		if err := s.reopen(storeWriteBuffer); err != nil {
			b.Fatal(err)
		}
		cpu += cpuTime() - before
		s.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*ids), "ns/record")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*ids), "cpu-ns/record")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
