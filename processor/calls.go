package processor

import (
	"time"

	"github.com/dedupkit/dedup/internal/engine"
)

// A handler that calls a payment API or a database takes 100 ms to seconds
// an event. A call that held the loop would hold the open transaction with
// it: a batch of slow calls would outlive the transaction timeout, the
// coordinator abort it and the member take the same batch again, and other
// instances would fence the member as dead. So the loop's work goes on
// while calls run:
// it commits on the commit interval, and a transaction holds only events
// that are done. Topology.Concurrency says how many calls run at once. With
// the default, one, the loop makes each call itself and a stand-in does its
// work meanwhile (standin.go); with more, the calls run on workers
// (engine.Call.Run) while the loop goes on.
//
// Order and exactly-once with calls side by side:
//   - A record whose dedup key has a call running or records parked (or
//     whose record key does, under OrderByRecordKey) is parked behind them
//     while the loop goes on with other records: each key's events are
//     judged and run one after the other, in the order the loop took them,
//     so a copy of a running event is judged after its first copy was
//     marked seen, and a producer's retry right after the original holds
//     up nothing but itself. A parked record holds its offset like a call.
//   - A partition's input offset is committed up to its oldest event not
//     yet done (calls.done). An event done past it is committed with
//     its outputs and seen mark; after a crash it is consumed again and the
//     table skips it as a duplicate.
//   - An interrupted call (the session ended) pins its partition's offset
//     for the rest of the session: its event is the next owner's to run.

// calls are the handler calls the loop has started and not yet finished,
// owned by the loop goroutine. With a limit above one the calls run on the
// session's workers, started as needed up to limit: a goroutine per call
// would cost a fast handler a good part of its time in goroutine starts and
// stack growth. A worker takes a
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
	// queues are the records parked behind each key, in the order taken;
	// a record is in the queue of each of its keys and starts once it is
	// first in all of them and none of its keys runs. ready are parked
	// records that may start, for when a call is free.
	queues map[string][]*flight
	parked int
	ready  []*flight
	// parts are the partitions' offsets held by a call: running, parked,
	// or interrupted (pinned until the session ends). held counts them. A
	// partition's entry stays once made: one per partition of the session.
	parts map[topicPartition]*heldOffsets
	held  int
	hooks hookList
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
	// held: its offset is in calls.parts; parkedAt: when it was parked;
	// inReady: it is in calls.ready.
	held     bool
	parkedAt time.Time
	inReady  bool
}

func newCalls(limit int, hooks hookList) *calls {
	return &calls{limit: limit, jobs: make(chan *flight, limit), results: make(chan *flight, limit), keys: map[string]int{},
		queues: map[string][]*flight{}, parts: map[topicPartition]*heldOffsets{}, hooks: hooks}
}

// blocked says a record of these keys must wait: a call of one of them
// runs, or records of one of them are parked.
func (c *calls) blocked(keys [2]string) bool {
	for _, k := range keys {
		if k != "" && (c.keys[k] > 0 || len(c.queues[k]) > 0) {
			return true
		}
	}
	return false
}

// park parks f behind its keys.
func (c *calls) park(f *flight) {
	c.hold(f)
	f.parkedAt = time.Now()
	for _, k := range f.keys {
		if k != "" {
			c.queues[k] = append(c.queues[k], f)
		}
	}
	c.parked++
}

// startable says parked f is first behind each of its keys, none running.
func (c *calls) startable(f *flight) bool {
	for _, k := range f.keys {
		if k != "" && (c.keys[k] > 0 || len(c.queues[k]) == 0 || c.queues[k][0] != f) {
			return false
		}
	}
	return true
}

// unpark takes startable f out of its keys' queues.
func (c *calls) unpark(f *flight) {
	for _, k := range f.keys {
		if k == "" {
			continue
		}
		if q := c.queues[k][1:]; len(q) > 0 {
			c.queues[k] = q
		} else {
			delete(c.queues, k)
		}
	}
	c.parked--
}

// wake makes the first records parked behind keys ready when they can
// start now.
func (c *calls) wake(keys [2]string) {
	for _, k := range keys {
		if k == "" || len(c.queues[k]) == 0 {
			continue
		}
		if f := c.queues[k][0]; !f.inReady && c.startable(f) {
			f.inReady = true
			c.ready = append(c.ready, f)
		}
	}
}

// nextReady is a parked record that can start now, out of its queues, or
// nil.
func (c *calls) nextReady() *flight {
	for len(c.ready) > 0 {
		f := c.ready[0]
		c.ready[0] = nil
		c.ready = c.ready[1:]
		f.inReady = false
		if c.startable(f) {
			c.unpark(f)
			return f
		}
	}
	return nil
}

// hold puts f's offset among its partition's held offsets.
func (c *calls) hold(f *flight) {
	if f.held {
		return
	}
	f.held = true
	h := c.parts[f.tp]
	if h == nil {
		h = &heldOffsets{next: -1}
		c.parts[f.tp] = h
	}
	h.offsets = append(h.offsets, f.in.msg.Offset)
	c.held++
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
	if c.limit == 1 {
		// One call at a time, made by the loop: no key can be busy, and no
		// other record is taken before it ends, so its offset needs
		// holding only if it is interrupted (member.finishCall).
		f.keys = [2]string{}
		return
	}
	for _, k := range f.keys {
		if k != "" {
			c.keys[k]++
		}
	}
	c.hold(f)
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
	c.wake(f.keys)
}

// done notes that the event at off of tp is done (its call finished, or it
// needed none; held: its offset was held) and returns the partition's
// offset to commit now: after every done event, short of the oldest offset
// a call or a parked record holds.
func (c *calls) done(tp topicPartition, off int64, held bool) int64 {
	if c.held == 0 { // no call running or pinned: the usual case
		return off + 1
	}
	h := c.parts[tp]
	if h == nil {
		return off + 1
	}
	if !held && len(h.offsets) == 0 {
		h.next = off + 1
		return off + 1
	}
	if held {
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
