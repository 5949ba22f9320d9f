package processor

import "time"

// A worker restarted on 10M seen IDs opens its stores and builds their key
// filters in the background (keyfilter.go): four scans of 830k keys each,
// all at once. They took 87% of both cores of a 2-core machine for about
// 3 s, and processing, the producer and the broker on the same machine
// starved: the restarted worker's first transactions waited seconds for
// acknowledgements, and its partitions paused 3-4 s instead of 1. Until a
// store's filter is built its lookups read LevelDB, which is slower but
// correct, so a build can wait and go slowly.
//
// scanPacer lets one background build of a Processor scan at a time, and
// rests it after each chunk as long as the chunk took: the builds take at
// most half a core between them, and the rest goes to processing. A
// restore's own build (reserveKeys) is not paced: the restore waits for it.
type scanPacer struct {
	turn chan struct{}
}

// scanChunk is how many keys a paced build scans between rests: tens of
// milliseconds.
const scanChunk = 1 << 15

func newScanPacer() *scanPacer { return &scanPacer{turn: make(chan struct{}, 1)} }

// wait takes the turn; false when stop was closed first.
func (p *scanPacer) wait(stop <-chan struct{}) bool {
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
