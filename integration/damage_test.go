package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/internal/tablefile"
	"github.com/dedupkit/dedup/processor"
)

// garble flips bytes in the middle of every file of dir whose name starts
// with prefix, as a disk fault would.
func garble(t *testing.T, dir, prefix string) int {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i := len(b) / 3; i < len(b)/3+16 && i < len(b); i++ {
			b[i] ^= 0x5a
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}

// A worker whose state dir was damaged while it was down (every
// partition's LevelDB manifest garbled) deletes the damaged stores, restores
// them from the changelog and goes on: re-published events are still
// skipped, and nothing is lost or doubled. Before, each start failed in
// LevelDB's open and the worker never got going. Both runtimes.
func TestDamagedStoreIsRestoredFromChangelog(t *testing.T) {
	for _, rt := range []struct {
		name  string
		start func(e *env, topo *dedup.Topology, state string) *worker
	}{
		{"exactly-once", func(e *env, topo *dedup.Topology, state string) *worker {
			return e.startEOS(topo, processor.Config{StateDir: state})
		}},
		{"best-effort", func(e *env, topo *dedup.Topology, state string) *worker { return e.start(topo, state) }},
	} {
		t.Run(rt.name, func(t *testing.T) {
			const partitions = 3
			e := newEnv(t, partitions)
			group := e.group("damaged")
			state := t.TempDir()
			topo := e.topology(group, &counter{})
			w := rt.start(e, topo, state)
			first := events("d1", 30)
			e.produce(first...)
			e.waitProcessed(group)
			w.stop(t)

			for p := int32(0); p < partitions; p++ {
				if garble(t, tablefile.Path(state, topo.TableTopic(), p), "MANIFEST-") == 0 {
					t.Fatalf("partition %d: no LevelDB manifest to damage under %s", p, state)
				}
			}

			obs := &counter{}
			rt.start(e, e.topology(group, obs), state)
			second := events("d2", 20)
			e.produce(append(second, first...)...)
			e.waitProcessed(group)

			e.exactlyOnce(append(append([]kafkatest.Record{}, first...), second...))
			if processed, skipped := obs.counts(); processed != len(second) || skipped != len(first) {
				t.Errorf("after the damage: processed %d, skipped %d; want %d new and %d re-published skipped",
					processed, skipped, len(second), len(first))
			}
		})
	}
}
