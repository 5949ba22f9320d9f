package integration

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/processor"
)

// tmpfs mounts a tmpfs of size bytes on a new directory and unmounts it when
// the test ends; it skips the test where mounting is not allowed (not root).
// A disk of its own is the only way to fill one without filling the
// machine's.
func tmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+strconv.FormatInt(size, 10), "tmpfs", dir).CombinedOutput()
	if err != nil {
		kafkatest.Missing(t, "needs a tmpfs of its own to fill, and mount failed (root only): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fill writes a ballast file into dir until the file system reports it
// full, and returns the file's path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "ballast")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			return path
		}
	}
}

// A full disk under the state dir. The exactly-once worker's LevelDB write of
// a committed transaction fails (ENOSPC); the transaction is committed in
// Kafka, outputs and changelog records included, so the worker stops with
// the error rather than go on with a store behind its changelog. Started
// again once there is space, it catches up from the changelog: the events of
// the failed write are still known, re-published ones are skipped, and
// nothing is lost or doubled. Started while the disk is still full, it stops
// again. goka's runtime stops too (its callback's table write fails) and
// starts again; best-effort, its figures are logged, not asserted, beyond
// every new event being output.
func TestFullDiskStopsTheWorker(t *testing.T) {
	for _, rt := range []struct {
		name        string
		exactlyOnce bool
		start       func(e *env, topo *dedup.Topology, state string) *worker
	}{
		{"exactly-once", true, func(e *env, topo *dedup.Topology, state string) *worker {
			return e.startEOS(topo, processor.Config{StateDir: state})
		}},
		{"best-effort", false, func(e *env, topo *dedup.Topology, state string) *worker { return e.start(topo, state) }},
	} {
		t.Run(rt.name, func(t *testing.T) {
			state := tmpfs(t, 16<<20)
			e := newEnv(t, 3)
			group := e.group("diskfull")
			w := rt.start(e, e.topology(group, &counter{}), state)
			first := events("full1", 30)
			e.produce(first...)
			e.waitProcessed(group)

			ballast := fill(t, state)
			second := events("full2", 600) // enough to need new pages of every journal
			e.produce(second...)
			stopsOnAFullDisk(t, w, rt.exactlyOnce)
			// Started again on the still full disk, it stops again rather than
			// retry (the exactly-once worker used to rejoin the group every
			// second, rebalancing its other members each time).
			stopsOnAFullDisk(t, rt.start(e, e.topology(group, &counter{}), state), rt.exactlyOnce)

			if err := os.Remove(ballast); err != nil {
				t.Fatal(err)
			}
			obs := &counter{}
			rt.start(e, e.topology(group, obs), state)
			third := events("full3", 20)
			e.produce(append(append(third, first...), second...)...)
			e.waitProcessed(group)
			all := append(append(append([]kafkatest.Record{}, first...), second...), third...)

			if !rt.exactlyOnce {
				out := eventIDs(t, e.read(e.output))
				for id := range eventIDs(t, third) {
					if out[id] == 0 {
						t.Errorf("new event %s not in the output after the restart", id)
					}
				}
				missing, doubled := 0, 0
				for id := range eventIDs(t, all) {
					switch {
					case out[id] == 0:
						missing++
					case out[id] > 1:
						doubled++
					}
				}
				t.Logf("best-effort after a full disk: %d of %d events missing, %d output more than once",
					missing, len(all), doubled)
				return
			}
			e.exactlyOnce(all)
			// Every re-published copy is skipped, including those of the
			// events whose LevelDB write failed: the restart knows them from
			// the changelog. The events of the transactions after the failed
			// one were not committed and are read again: processed now, once.
			if processed, skipped := obs.counts(); skipped != len(first)+len(second) ||
				processed < len(third) || processed > len(third)+len(second) {
				t.Errorf("after the disk had space again: processed %d, skipped %d; want %d re-published skipped and %d to %d processed",
					processed, skipped, len(first)+len(second), len(third), len(third)+len(second))
			}
		})
	}
}

// stopsOnAFullDisk waits for w to stop on its own with an error that says
// the disk is full.
func stopsOnAFullDisk(t *testing.T, w *worker, exactlyOnce bool) {
	t.Helper()
	var err error
	select {
	case err = <-w.done:
		w.cancel = nil // stopped on its own
	case <-time.After(60 * time.Second):
		t.Fatal("the worker still runs 60 s after its disk filled up")
	}
	// goka formats LevelDB's error with %v: only its text is left.
	if err == nil || !strings.Contains(err.Error(), syscall.ENOSPC.Error()) ||
		(exactlyOnce && !errors.Is(err, syscall.ENOSPC)) {
		t.Fatalf("the worker on a full disk ended with %v; want an error that says the disk is full (ENOSPC)", err)
	}
	t.Logf("worker on a full disk: %.300s", err)
}
