package processor

import (
	"sync/atomic"
	"time"
)

// A restarted worker opens its stores and builds their key filters in the
// background (keyfilter.go): one full scan of the keys per store. Run all at
// once and unpaced, the scans take most of the CPU for a while, and
// processing, the producer and a broker on the same machine starve: the
// first transactions wait for acknowledgements and the partitions pause
// longer. Until a store's filter is built its lookups read LevelDB, which is
// slower but correct, so a build can wait and go slowly.
//
// scanPacer makes the background builds of a Processor wait while one of
// its members is back from a rebalance and not every partition it claimed
// processes again (held, resume.go), lets one build scan at a time, and rests
// it after each chunk as long as the chunk took: the builds take at most
// half a core between them, and none while partitions wait to process
// again. A restore's own build (reserveKeys) is not paced: the restore
// waits for it.
type scanPacer struct {
	turn chan struct{}
	held atomic.Int32 // members between a Setup and their partitions' resumption
}

const (
	// scanChunk is how many keys a paced build scans between rests: tens
	// of milliseconds.
	scanChunk = 1 << 15
	// heldPoll is how often a build waiting for the members looks again.
	heldPoll = 50 * time.Millisecond
)

func newScanPacer() *scanPacer { return &scanPacer{turn: make(chan struct{}, 1)} }

// hold makes the builds wait until release; a member holds them from its
// Setup until its partitions are restored and each one was in a commit or
// has nothing to process (resume.go), or its session ended.
func (p *scanPacer) hold()    { p.held.Add(1) }
func (p *scanPacer) release() { p.held.Add(-1) }

// wait waits until no member holds the builds and takes the turn; false
// when stop was closed first.
func (p *scanPacer) wait(stop <-chan struct{}) bool {
	for p.held.Load() > 0 {
		t := time.NewTimer(heldPoll)
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
			return false
		}
	}
	select {
	case p.turn <- struct{}{}:
		return true
	case <-stop:
		return false
	}
}

func (p *scanPacer) done() { <-p.turn }

// rest waits as long as the chunk that began at start took; false when
// stop was closed first.
func (p *scanPacer) rest(start time.Time, stop <-chan struct{}) bool {
	t := time.NewTimer(time.Since(start))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	}
}

// holdScans makes the Processor's key filter builds wait until m released
// them (releaseScans), once per session.
func (bg *background) holdScans() {
	if bg.scans != nil && bg.holdingScans.CompareAndSwap(false, true) {
		bg.scans.hold()
	}
}

func (bg *background) releaseScans() {
	if bg.holdingScans.CompareAndSwap(true, false) {
		bg.scans.release()
	}
}
