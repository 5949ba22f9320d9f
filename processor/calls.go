package processor

import (
	"time"

	"github.com/dedupkit/dedup/internal/engine"
)

// A handler that calls a payment API or a database takes 100 ms to seconds
// an event. Run on the loop goroutine, such a call held the loop, and with
// it the open transaction: a batch of slow calls outlived the transaction
// timeout, the coordinator aborted it, and the member took the same batch
// again; other instances fenced the member as dead. So the loop starts each
// handler call on a goroutine of its own (engine.Call.Run) and goes on: it
// commits on the commit interval while calls run, and a transaction holds
// only events that are done. Topology.Concurrency says how many calls run
// at once; with the default, one, the loop waits for the running call
// before it takes the next record, as before, but it commits meanwhile.
//
// Order and exactly-once with calls side by side:
//   - A record whose dedup key has a call running (or whose record key
//     does, under OrderByRecordKey) waits until that call is done, and the
//     records behind it wait with it: each key's events are judged and run
//     one after the other, in offset order, so a duplicate of a running
//     event is judged after its first copy was marked seen.
//   - A partition's input offset is committed up to its oldest event not
//     yet done (calls.committable). An event done past it is committed with
//     its outputs and seen mark; after a crash it is consumed again and the
//     table skips it as a duplicate.
//   - An interrupted call (the session ended) pins its partition's offset
//     for the rest of the session: its event is the next owner's to run.

// calls are the handler calls the loop has started and not yet finished,
// owned by the loop goroutine. The calls run on the session's workers,
// started as needed up to limit: a goroutine per call cost a fast handler a
// tenth of its time in goroutine starts and stack growth. A worker takes a
// flight from jobs, runs its handler and sends it back on results; both
// have room for every call, so neither side ever blocks. The loop finishes
// each call (member.finishCall), waits for all before its session ends,
// and then closes jobs, which ends the workers (member.loop).
type calls struct {
	limit   int
	running int
	workers int
	jobs    chan *flight
	results chan *flight
	keys    map[string]int // dedup and record keys of running calls
	// parts are the partitions' offsets held by a call: running, or
	// interrupted (pinned until the session ends). held counts them. A
	// partition's entry stays once made: one per partition of the session.
	parts map[topicPartition]*heldOffsets
	held  int
	hooks CallHooks
}

// heldOffsets are one partition's offsets that calls hold, ascending (a
// partition's records are started in offset order), and the offset after
// its last event that is done.
type heldOffsets struct {
	offsets []int64
	next    int64
}

// flight is one record in the loop, and its call once started: one
// allocation per record for all of it.
type flight struct {
	in      inbound
	call    engine.Call
	rt      txnContext
	tp      topicPartition
	keys    [2]string // dedup key, record key ("" when not ordered by it)
	started time.Time // of the call
}

func newCalls(limit int, hooks CallHooks) *calls {
	return &calls{limit: limit, jobs: make(chan *flight, limit), results: make(chan *flight, limit), keys: map[string]int{},
		parts: map[topicPartition]*heldOffsets{}, hooks: hooks}
}

// free says a record of these keys may be started now.
func (c *calls) free(keys [2]string) bool { return c.running < c.limit && !c.busy(keys) }

// busy says a call of one of these keys runs.
func (c *calls) busy(keys [2]string) bool {
	for _, k := range keys {
		if k != "" && c.keys[k] > 0 {
			return true
		}
	}
	return false
}

// start starts f's call on a worker, first starting one if each is busy.
func (c *calls) start(f *flight) {
	c.note(f)
	if c.workers < c.running {
		c.workers++
		go c.work()
	}
	c.jobs <- f
}

// work is one worker: it runs calls until the loop closes jobs.
func (c *calls) work() {
	for f := range c.jobs {
		f.call.Run(f.rt.ctx)
		c.results <- f
	}
}

// note notes a started call.
func (c *calls) note(f *flight) {
	f.started = time.Now()
	c.hooks.CallStarted()
	c.running++
	for _, k := range f.keys {
		if k != "" {
			c.keys[k]++
		}
	}
	h := c.parts[f.tp]
	if h == nil {
		h = &heldOffsets{next: -1}
		c.parts[f.tp] = h
	}
	h.offsets = append(h.offsets, f.in.msg.Offset)
	c.held++
}

// stopped notes that f's call returned; its keys are free again.
func (c *calls) stopped(f *flight) {
	c.hooks.CallEnded(time.Since(f.started))
	c.running--
	for _, k := range f.keys {
		if k != "" {
			if c.keys[k]--; c.keys[k] == 0 {
				delete(c.keys, k)
			}
		}
	}
}

// done notes that the event at off of tp is done (its call finished, or it
// needed none) and returns the partition's offset to commit now: after
// every done event, short of the oldest offset a call holds.
func (c *calls) done(tp topicPartition, off int64, called bool) int64 {
	if c.held == 0 { // no call running or pinned: the usual case
		return off + 1
	}
	h := c.parts[tp]
	if h == nil {
		return off + 1
	}
	if !called && len(h.offsets) == 0 {
		h.next = off + 1
		return off + 1
	}
	if called {
		for i, o := range h.offsets {
			if o == off {
				h.offsets = append(h.offsets[:i], h.offsets[i+1:]...)
				c.held--
				break
			}
		}
	}
	h.next = max(h.next, off+1)
	if len(h.offsets) > 0 {
		return h.offsets[0]
	}
	return h.next
}
