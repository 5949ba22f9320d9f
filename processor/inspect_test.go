package processor

import (
	"testing"
	"time"

	"github.com/dedupkit/dedup/internal/tablefile"
)

// TableStats reports each local partition's size, changelog offset and
// earliest expiry, which it finds by scanning the records.
func TestTableStats(t *testing.T) {
	state := t.TempDir()
	now := time.Now().Truncate(time.Second)
	expiries := map[int32][]time.Duration{0: {3 * time.Hour, time.Hour, 2 * time.Hour}, 1: {}}
	for p, exps := range expiries {
		s, err := openStore(tablefile.Path(state, "g-table", p), seenExpiry, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range exps {
			s.Set(string(rune('a'+i)), seenValue(t, now.Add(d)))
		}
		if err := s.Apply(int64(10 + p)); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	stats, err := tablefile.Stats(state, "g-table")
	if err != nil {
		t.Fatal(err)
	}
	want := []tablefile.PartitionStats{
		{Partition: 0, Entries: 3, ChangelogNext: 10, NextExpiry: now.Add(time.Hour).UnixNano()},
		{Partition: 1, Entries: 0, ChangelogNext: 11, NextExpiry: 0},
	}
	if len(stats) != len(want) {
		t.Fatalf("stats %+v, want %+v", stats, want)
	}
	for i := range want {
		if stats[i] != want[i] {
			t.Fatalf("partition %d: %+v, want %+v", i, stats[i], want[i])
		}
	}
}
