package processor

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/syndtr/goleveldb/leveldb"

	"github.com/dedupkit/dedup/codecs"
	"github.com/dedupkit/dedup/internal/kafkautil"
)

// BenchmarkStoreRestore applies a changelog partition of 800,000 distinct
// random event IDs, held in memory, to an empty store as readChangelog
// does (applyChangelog): what a takeover without a standby, or a
// newcomer's warm-up, spends on LevelDB.
// Per op, one whole restore; ns/record is its wall time per record and
// cpu-ns/record the process's CPU per record, LevelDB's compactions
// included, those a restore leaves to the background too.
// BenchmarkRestoreFromKafka adds the fetches.
func BenchmarkStoreRestore(b *testing.B) {
	const ids = 800000
	v := benchSeenValue(b)
	recs := make([]*sarama.Record, ids)
	for i, id := range randomEventIDs(ids) {
		recs[i] = &sarama.Record{Key: []byte(id), Value: v}
	}
	benchRestores(b, ids, func(s *store) error {
		_, err := applyChangelog(s, 0, ids, nil, func(fn func(int64, *sarama.Record) error) (int64, error) {
			for off, rec := range recs {
				if err := fn(int64(off), rec); err != nil {
					return int64(off), err
				}
			}
			return ids, nil
		})
		return err
	})
}

// benchRestores runs restore on an empty store once per op and reports its
// wall time and the process's CPU time per record restored.
func benchRestores(b *testing.B, records int, restore func(*store) error) {
	var cpu time.Duration
	for b.Loop() {
		s, err := openStore(b.TempDir(), seenExpiry, nil)
		if err != nil {
			b.Fatal(err)
		}
		before := cpuTime()
		if err := restore(s); err != nil {
			b.Fatal(err)
		}
		awaitCompactions(b, s)
		cpu += cpuTime() - before
		s.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*records), "ns/record")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*records), "cpu-ns/record")
}

// awaitCompactions waits, for up to a minute, until LevelDB has no
// compaction left to do on s: the benchmarks count the CPU a restore leaves
// to background compactions as the restore's, and the tests check that
// they end.
func awaitCompactions(tb testing.TB, s *store) {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for !compacted(s) {
		if time.Now().After(deadline) {
			tb.Fatal("LevelDB still had compactions to do a minute after the restore")
		}
		time.Sleep(time.Millisecond)
	}
}

// compacted reports whether goleveldb would start no table compaction on
// s: fewer level-0 tables than its trigger and every other level within
// its size limit, under the options storeOptions gives s's current mode.
func compacted(s *store) bool {
	var st leveldb.DBStats
	if err := s.db.Stats(&st); err != nil {
		return true
	}
	o := storeOptions(s.writeBuffer)
	if len(st.LevelTablesCounts) > 0 && st.LevelTablesCounts[0] >= o.GetCompactionL0Trigger() {
		return false
	}
	for l := 1; l < len(st.LevelSizes); l++ {
		if float64(st.LevelSizes[l]) >= float64(o.GetCompactionTotalSize(l)) {
			return false
		}
	}
	return true
}

// randomEventIDs returns n distinct event IDs in random order, as 32 hex
// digits (the same on every call).
func randomEventIDs(n int) []string {
	rng := rand.New(rand.NewPCG(1, 2))
	ids := make([]string, n)
	for i := range ids {
		var id [16]byte
		for j := range id {
			id[j] = byte(rng.Uint32())
		}
		ids[i] = hex.EncodeToString(id[:])
	}
	return ids
}

// benchSeenValue is the changelog value of a seen record, as the benchmarks
// write it.
func benchSeenValue(b testing.TB) []byte {
	b.Helper()
	v, err := (&codecs.SeenRecord{Topic: "orders", AggregateID: "order-1", ExpiresAt: time.Now().Add(time.Hour)}).MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// cpuTime is the CPU time this process used so far, every goroutine's.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRestoreFromKafka restores a changelog partition of 400,000 distinct
// random event IDs from a real broker (KAFKA_BROKERS) into an empty store:
// BenchmarkStoreRestore with the fetches. Per op, one whole restore. The
// topic is written once, before the timer starts.
//
//	KAFKA_BROKERS=127.0.0.1:9092 go test -run '^$' -bench RestoreFromKafka ./processor
func BenchmarkRestoreFromKafka(b *testing.B) {
	brokers := os.Getenv("KAFKA_BROKERS")
	if brokers == "" {
		b.Skip("KAFKA_BROKERS is not set: this benchmark reads a real broker")
	}
	const ids = 400000
	cfg := sarama.NewConfig()
	cfg.Version = kafkautil.SaramaVersion
	cfg.Producer.Return.Successes = true
	cfg.Producer.Flush.Bytes = 1 << 20
	cfg.Producer.Flush.Frequency = 10 * time.Millisecond
	client, err := sarama.NewClient(strings.Split(brokers, ","), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	topic := fmt.Sprintf("bench-restore-%d", time.Now().UnixNano())
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		b.Fatal(err)
	}
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false); err != nil {
		b.Fatal(err)
	}
	defer admin.DeleteTopic(topic)
	writeSeenIDs(b, client, topic, ids)
	end, err := client.GetOffset(topic, 0, sarama.OffsetNewest)
	if err != nil {
		b.Fatal(err)
	}
	m := &member{client: client, tableTopic: topic}
	benchRestores(b, ids, func(s *store) error {
		n, err := m.readChangelog(context.Background(), 0, s, 0, end, nil)
		if err == nil && n != ids {
			err = fmt.Errorf("restored %d records, want %d", n, ids)
		}
		return err
	})
}

// writeSeenIDs produces n seen records keyed by distinct random event IDs
// to topic, of one partition.
func writeSeenIDs(b *testing.B, client sarama.Client, topic string, n int) {
	b.Helper()
	p, err := sarama.NewAsyncProducerFromClient(client)
	if err != nil {
		b.Fatal(err)
	}
	v := benchSeenValue(b)
	done := make(chan error, 1)
	go func() {
		var first error
		for range n {
			select {
			case <-p.Successes():
			case perr := <-p.Errors():
				if first == nil {
					first = perr.Err
				}
			}
		}
		done <- first
	}()
	for _, id := range randomEventIDs(n) {
		p.Input() <- &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(id), Value: sarama.ByteEncoder(v)}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	if err := p.Close(); err != nil {
		b.Fatal(err)
	}
}
