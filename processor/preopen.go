package processor

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/dedupkit/dedup/internal/tablefile"
)

// Each LevelDB open after a kill -9 replays the journal the kill left and
// writes it out as a table, which takes a while for a large store; opened
// only once the group has handed the partitions over, the partitions would
// wait for it. A static member that rejoins gets the partitions it had, so
// the member notes them in the state dir at each Setup (claimed-<member>),
// and a restarted Processor opens those stores while its producers start
// and its members join. The stores
// go to the kept ones (keptStores) as if the member had kept them from a
// session: Setup takes those it claims again and closes the others. A note
// that is missing, unreadable or out of date costs only the head start.

// claimedPath is where member notes the partitions it claimed.
func claimedPath(stateDir, member string) string {
	return filepath.Join(stateDir, "claimed-"+member)
}

// saveClaimed notes the partitions m claimed, for its next start.
func (m *member) saveClaimed(claimed []int32) {
	parts := make([]string, len(claimed))
	for i, p := range claimed {
		parts[i] = strconv.Itoa(int(p))
	}
	path := claimedPath(m.cfg.StateDir, m.memberName)
	tmp := path + ".tmp"
	err := os.MkdirAll(m.cfg.StateDir, 0o755)
	if err == nil {
		err = os.WriteFile(tmp, []byte(strings.Join(parts, ",")+"\n"), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		m.log.Warn("could not note the claimed partitions: a restart opens their stores only once they are assigned", "err", err)
	}
}

// loadClaimed reads the partitions a member noted; none when there is no
// readable note.
func loadClaimed(path string) []int32 {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []int32
	for _, f := range strings.Split(strings.TrimSpace(string(data)), ",") {
		p, err := strconv.ParseInt(f, 10, 32)
		if err != nil || p < 0 {
			return nil
		}
		out = append(out, int32(p))
	}
	return out
}

// startPreopen opens the stores the members noted (preopen) in a goroutine
// each member waits for in its first Setup and before it closes its
// stores. Their key filter builds wait, as after every Setup, until each
// member's partitions process again (scanpace.go): builds started by the
// opens would compete for the CPU with the producers' start and the join,
// and lengthen the pause a restart causes.
func (p *Processor) startPreopen() {
	done := make(chan struct{})
	for _, m := range p.members {
		m.bg.preopened = done
		m.bg.holdScans()
	}
	go p.preopen(done)
}

// preopen opens, up to restoreSlots at once, the stores of the partitions
// each member noted that are on disk, and keeps them for the member. It
// closes done when all are open (or failed: the restore then opens the
// store itself and reports the failure).
func (p *Processor) preopen(done chan<- struct{}) {
	defer close(done)
	slots := make(chan struct{}, restoreSlots())
	var wg sync.WaitGroup
	for _, m := range p.members {
		for _, part := range loadClaimed(claimedPath(p.cfg.StateDir, m.memberName)) {
			path := tablefile.Path(p.cfg.StateDir, p.topo.TableTopic(), part)
			if part >= p.partitions || !storeExists(path) {
				continue
			}
			wg.Add(1)
			slots <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				s, damage, err := openOrWipe(path, seenExpiry, m.bg.scans)
				if damage != nil {
					m.log.Error("table store damaged, deleted it to restore it from the changelog",
						"partition", part, "path", path, "err", damage)
				}
				if err != nil {
					return
				}
				m.bg.kept.putOpened(m, part, s)
			}()
		}
	}
	wg.Wait()
}

// storeExists reports whether a LevelDB store exists at path.
func storeExists(path string) bool {
	_, err := os.Stat(filepath.Join(path, "CURRENT"))
	return !errors.Is(err, os.ErrNotExist)
}

// awaitPreopen waits until the Processor's stores noted at start are open;
// false when done closed first.
func (bg *background) awaitPreopen(done <-chan struct{}) bool {
	if bg.preopened == nil {
		return true
	}
	select {
	case <-bg.preopened:
		return true
	case <-done:
		return false
	}
}
