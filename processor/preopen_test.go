package processor

import (
	"log/slog"
	"os"
	"slices"
	"testing"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/tablefile"
)

func TestClaimedNoteRoundTrip(t *testing.T) {
	state := t.TempDir()
	m := &member{cfg: &Config{StateDir: state}, memberName: "g-abc-0", log: slog.New(slog.DiscardHandler)}
	m.saveClaimed([]int32{0, 3, 11})
	if got := loadClaimed(claimedPath(state, "g-abc-0")); !slices.Equal(got, []int32{0, 3, 11}) {
		t.Fatalf("loaded %v, want [0 3 11]", got)
	}
	for _, bad := range []string{"", "1,x", "-1", "1,,2"} {
		if err := os.WriteFile(claimedPath(state, "g-abc-0"), []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := loadClaimed(claimedPath(state, "g-abc-0")); got != nil {
			t.Errorf("note %q loaded as %v, want none", bad, got)
		}
	}
	if got := loadClaimed(claimedPath(state, "g-other-0")); got != nil {
		t.Errorf("no note loaded as %v", got)
	}
}

// A restarted Processor opens the stores its member noted that are on disk
// and within the topic's partitions, and keeps them for it as opened at
// start; Setup's restores take them, and the member closes any left.
func TestPreopenKeepsTheNotedStores(t *testing.T) {
	state := t.TempDir()
	topo := &dedup.Topology{Group: "g"}
	for _, p := range []int32{1, 2} {
		s, err := openStore(tablefile.Path(state, topo.TableTopic(), p), seenExpiry, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	cfg := &Config{StateDir: state}
	m := &member{cfg: cfg, topo: topo, memberName: "g-abc-0", bg: background{kept: &keptStores{}, scans: newScanPacer()}, hooks: nil, log: slog.New(slog.DiscardHandler)}
	m.saveClaimed([]int32{1, 2, 3, 40}) // 3 is not on disk, 40 not a partition
	p := &Processor{cfg: *cfg, topo: topo, partitions: 12, members: []*member{m}}
	p.startPreopen()
	// The opens' key filter builds wait like those after a Setup, until
	// the member's partitions process again.
	if !m.bg.holdingScans.Load() || m.bg.scans.held.Load() != 1 {
		t.Fatalf("member holds the builds: %v (%d holds); want it to hold them from the start", m.bg.holdingScans.Load(), m.bg.scans.held.Load())
	}
	if !m.bg.awaitPreopen(nil) {
		t.Fatal("preopen did not end")
	}
	var stores []*store
	for _, part := range []int32{1, 2} {
		s, opened := m.bg.kept.take(part)
		if s == nil || !opened {
			t.Fatalf("partition %d: store %v, opened %v; want it opened at start", part, s, opened)
		}
		if s.keys != nil || s.rebuild == nil {
			t.Fatalf("partition %d: filter %v, build %v; want its first build started and held", part, s.keys, s.rebuild)
		}
		stores = append(stores, s)
	}
	m.bg.releaseScans()
	for i, s := range stores {
		if r := <-s.rebuild.done; r.err != nil {
			t.Fatalf("key filter build after the release: %v", r.err)
		}
		s.rebuild = nil
		m.bg.kept.putOpened(m, []int32{1, 2}[i], s) // back, for closeKept
	}
	for _, part := range []int32{3, 40} {
		if s, _ := m.bg.kept.take(part); s != nil {
			t.Errorf("partition %d opened, but it had no store", part)
		}
	}
	if _, err := os.Stat(tablefile.Path(state, topo.TableTopic(), 3)); !os.IsNotExist(err) {
		t.Errorf("a store was created for partition 3: %v", err)
	}
	m.closeKept()
	for _, part := range []int32{1, 2} { // closed: LevelDB opens it again
		s, err := openStore(tablefile.Path(state, topo.TableTopic(), part), seenExpiry, nil)
		if err != nil {
			t.Fatalf("partition %d still open after closeKept: %v", part, err)
		}
		s.Close()
	}
}
