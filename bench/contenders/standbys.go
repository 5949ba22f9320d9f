package contenders

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// standbyStatus writes how many of the worker's standby replicas are
// behind to a file, each time that changes, so that the failover harness
// can wait for them to have caught up before its next event: a takeover
// measured while the standbys are still reading the whole changelog would
// measure a restore, not a standby. The file says "behind N" (N standbys
// more than standbyCaughtUp records behind), "starting" before any report.
type standbyStatus struct {
	path   string
	mu     sync.Mutex
	lag    map[int32]int64
	behind int
}

// standbyCaughtUp is the worker's acceptable lag (processor/standby.go).
const standbyCaughtUp = 10_000

func newStandbyStatus(path string) (*standbyStatus, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	s := &standbyStatus{path: path, lag: map[int32]int64{}, behind: -1}
	return s, s.write("starting")
}

// report takes a standby's lag (< 0: the standby is gone).
func (s *standbyStatus) report(p int32, lag int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if lag < 0 {
		delete(s.lag, p)
	} else {
		s.lag[p] = lag
	}
	behind := 0
	for _, l := range s.lag {
		if l > standbyCaughtUp {
			behind++
		}
	}
	if behind != s.behind {
		s.behind = behind
		_ = s.write(fmt.Sprintf("behind %d", behind))
	}
}

func (s *standbyStatus) write(status string) error {
	tmp := s.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(status+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, s.path)
}
