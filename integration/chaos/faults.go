package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/dedupkit/dedup/internal/netfault"
)

type faultKind int

const (
	faultKill faultKind = iota
	faultScale
	faultBrokerKill
	faultBrokerStart
	faultZombie
	faultNetPartition
	faultWipe
)

// fault is one planned fault: what, and when after the load started.
type fault struct {
	at     time.Duration
	kind   faultKind
	node   int           // broker faults
	down   time.Duration // broker starts: how long after the kill
	target int           // scale steps: the instance count to reach
}

// planFaults spreads the faults at random moments over the load window.
// Broker outages get disjoint stretches of it, so only one broker is down
// at a time; the other faults may hit while a broker is down.
func planFaults(cfg *Config, window time.Duration, rng *rand.Rand) []fault {
	from, to := window/20, window*9/10
	at := func() time.Duration { return from + time.Duration(rng.Int64N(int64(to-from))) }
	var plan []fault
	for range cfg.Kills {
		plan = append(plan, fault{at: at(), kind: faultKill})
	}
	for range cfg.Zombies {
		plan = append(plan, fault{at: at(), kind: faultZombie})
	}
	for range cfg.Wipes {
		plan = append(plan, fault{at: at(), kind: faultWipe})
	}
	for range cfg.NetPartitions {
		plan = append(plan, fault{at: at(), kind: faultNetPartition})
	}
	steps := make([]time.Duration, cfg.ScaleSteps)
	for i := range steps {
		steps[i] = at()
	}
	slices.Sort(steps)
	count := cfg.Instances
	for _, t := range steps {
		next := 1 + rng.IntN(cfg.Instances-1)
		if next >= count {
			next++
		}
		count = next
		plan = append(plan, fault{at: t, kind: faultScale, target: next})
	}
	if cfg.BrokerKills > 0 {
		nodes := rng.Perm(cfg.Nodes)
		span := (to - from) / time.Duration(cfg.BrokerKills)
		for i := range cfg.BrokerKills {
			down := cfg.BrokerDown/2 + time.Duration(rng.Int64N(int64(cfg.BrokerDown/2)+1))
			start := from + time.Duration(i)*span + time.Duration(rng.Int64N(int64(span/3)+1))
			node := nodes[i%len(nodes)] + 1
			down = min(down, span/2)
			plan = append(plan, fault{at: start, kind: faultBrokerKill, node: node},
				fault{at: start + down, kind: faultBrokerStart, node: node, down: down})
		}
	}
	slices.SortStableFunc(plan, func(a, b fault) int { return int(a.at - b.at) })
	return plan
}

// faultCounts are the faults applied, for the report.
type faultCounts struct {
	kills, scaleSteps, brokerKills, zombies, fenced, wipes int
	netPartitions, netAborted                              int // w1 cut off; its transaction aborted after
	scalePath                                              []int
	brokerDowntime                                         []string
	notes                                                  []string // faults that did not go as planned
}

// chaos applies a plan to a fleet and a cluster.
type chaos struct {
	cfg     *Config
	fleet   *fleet
	cluster *cluster
	proxy   *netfault.Proxy // w1's way to the brokers; nil without --net-partitions
	// loadDone is closed once the load has been produced.
	loadDone <-chan struct{}
	group    string
	mode     string
	rng      *rand.Rand
	log      func(format string, args ...any)
	counts   faultCounts
	downAt   map[int]time.Time
	restart  *brokerRestart // the broker start under way, if any
}

// brokerRestart is a `kafka.sh start N` running in its own goroutine, so
// that other faults keep coming while the broker boots.
type brokerRestart struct {
	node int
	done chan error // receives the result once
	upAt time.Time  // set before done is sent
}

// run applies the plan in order, each at its moment (or at once when
// late), until it is done or ctx is done. A broker still down at the end is
// restarted.
func (c *chaos) run(ctx context.Context, start time.Time, plan []fault) error {
	c.counts.scalePath = []int{len(c.fleet.running())}
	c.downAt = map[int]time.Time{}
	defer func() { // no broker stays down, whatever happened
		if err := c.awaitBroker(); err != nil {
			c.note("%v", err)
		}
		for node := range c.downAt {
			c.startBroker(node)
			if err := c.awaitBroker(); err != nil {
				c.note("%v", err)
			}
		}
	}()
	for _, f := range plan {
		due := start.Add(f.at) // the planned random moment
		if killed, ok := c.downAt[f.node]; ok && f.kind == faultBrokerStart && killed.Add(f.down).After(due) {
			// The kill came late (the faults before it took longer than
			// planned): keep the planned downtime. A start applied at once
			// could leave the broker down for next to no time.
			due = killed.Add(f.down)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(due)):
		}
		if err := c.apply(ctx, f); err != nil {
			return err
		}
	}
	return nil
}

func (c *chaos) apply(ctx context.Context, f fault) error {
	switch f.kind {
	case faultKill:
		return c.kill()
	case faultScale:
		return c.scale(f.target)
	case faultBrokerKill:
		if err := c.awaitBroker(); err != nil { // one broker down at a time
			return err
		}
		c.log("broker: SIGKILL node %d", f.node)
		if err := c.cluster.killNode(f.node); err != nil {
			return err
		}
		c.downAt[f.node] = time.Now()
		c.counts.brokerKills++
	case faultBrokerStart:
		c.startBroker(f.node)
	case faultZombie:
		return c.zombie(ctx)
	case faultNetPartition:
		return c.netPartition(ctx)
	case faultWipe:
		return c.wipe()
	}
	return nil
}

func (c *chaos) pick(slots []int) int { return slots[c.rng.IntN(len(slots))] }

// kill SIGKILLs a random running instance and restarts it on its state dir.
func (c *chaos) kill() error {
	run := c.fleet.running()
	if len(run) == 0 {
		c.note("kill skipped: no instance running")
		return nil
	}
	slot := c.pick(run)
	p, err := c.fleet.kill(slot)
	if err != nil {
		return err
	}
	c.counts.kills++
	if err := c.fleet.start(slot); err != nil {
		c.note("restart after kill: %v", err)
	}
	c.log("SIGKILL w%d (incarnation %d); restarted (kill %d)", slot+1, p.inc, c.counts.kills)
	return nil
}

// scale changes the instance count to target: new instances are started,
// surplus ones stopped with SIGTERM as an operator would.
func (c *chaos) scale(target int) error {
	from := len(c.fleet.wantedSlots())
	for len(c.fleet.wantedSlots()) < target {
		idle := c.fleet.idle()
		if len(idle) == 0 {
			break
		}
		if err := c.fleet.start(idle[0]); err != nil { // the slot stays wanted: supervise retries it
			c.note("scale up: %v", err)
		}
	}
	for want := c.fleet.wantedSlots(); len(want) > target; want = c.fleet.wantedSlots() {
		slot := c.pick(want)
		if p, err := c.fleet.term(slot); err != nil {
			c.note("scale down, w%d incarnation %d: %v (log %s)", slot+1, p.inc, err, p.logPath)
		}
	}
	c.counts.scaleSteps++
	c.counts.scalePath = append(c.counts.scalePath, target)
	c.log("scale %d -> %d instances (step %d; running now %s)", from, target, c.counts.scaleSteps, slotNames(c.fleet.running()))
	return nil
}

// startBroker restarts a killed broker in the background.
func (c *chaos) startBroker(node int) {
	r := &brokerRestart{node: node, done: make(chan error, 1)}
	c.restart = r
	c.log("broker: starting node %d", node)
	go func() { // owned by c: awaitBroker receives its result
		err := c.cluster.startNode(node)
		r.upAt = time.Now()
		r.done <- err
	}()
}

// awaitBroker waits for the broker start under way, if any.
func (c *chaos) awaitBroker() error {
	r := c.restart
	if r == nil {
		return nil
	}
	c.restart = nil
	if err := <-r.done; err != nil {
		return fmt.Errorf("restart broker %d: %w", r.node, err)
	}
	down := r.upAt.Sub(c.downAt[r.node]).Round(100 * time.Millisecond)
	delete(c.downAt, r.node)
	c.counts.brokerDowntime = append(c.counts.brokerDowntime, fmt.Sprintf("node %d down %v", r.node, down))
	c.log("broker: node %d back after %v", r.node, down)
	return nil
}

// zombie SIGSTOPs an instance until the group has dropped it (its session
// timed out and the others took its partitions), then resumes it: its next
// commit must be fenced.
func (c *chaos) zombie(ctx context.Context) error {
	if len(c.fleet.running()) < 2 { // someone has to take over
		if err := c.scale(len(c.fleet.running()) + 1); err != nil {
			return err
		}
	}
	run := c.fleet.running()
	if len(run) < 2 {
		c.note("zombie skipped: fewer than two instances running")
		return nil
	}
	slot := c.pick(run)
	working := c.settle(ctx, "zombie", run, slot)
	fencedBefore, _ := c.fleet.metric(slot, "dedup_fencings_total")
	sessionsBefore, _ := c.fleet.metric(slot, "dedup_rebalances_total")
	p, err := c.fleet.signal(slot, syscall.SIGSTOP)
	if err != nil {
		return err
	}
	stopped := time.Now()
	c.log("SIGSTOP w%d (incarnation %d)", slot+1, p.inc)
	_, _, err = c.cluster.waitGroup(c.group, 2*time.Minute, func(n int, state string) bool {
		return n == len(run)-1 && state == "Stable" && time.Since(stopped) > c.cfg.SessionTimeout
	})
	if err != nil {
		c.note("zombie: the group did not drop w%d: %v", slot+1, err)
	}
	if _, err := c.fleet.signal(slot, syscall.SIGCONT); err != nil {
		c.note("zombie: w%d exited while stopped: %v", slot+1, err)
		return nil
	}
	c.counts.zombies++
	c.log("SIGCONT w%d after %v stopped (dropped by the group)", slot+1, time.Since(stopped).Round(100*time.Millisecond))
	if c.mode != exactlyOnce || !working { // goka's runtime has no fencing to observe
		return nil
	}
	v, err := c.awaitRise(ctx, slot, "dedup_fencings_total", fencedBefore, sessionsBefore)
	if err != nil {
		c.note("zombie w%d: %v", slot+1, err)
		return nil
	}
	c.counts.fenced += int(v - fencedBefore)
	c.log("zombie w%d fenced (dedup_fencings_total %v)", slot+1, v)
	return nil
}

// settle prepares the zombie and the cut, which both must be seen dropped by
// the group and must hold work. It waits until every running instance is a
// member of a stable group (a stopped static member stays until its session
// times out), so that the drop seen later is this one's, then until slot
// processes. It reports whether slot processed; what did not go as planned
// is noted under the fault's name.
func (c *chaos) settle(ctx context.Context, fault string, run []int, slot int) (working bool) {
	if _, _, err := c.cluster.waitGroup(c.group, time.Minute, func(n int, state string) bool { return n == len(run) && state == "Stable" }); err != nil {
		c.note("%s: group not stable before the fault: %v", fault, err)
	}
	if err := c.waitProcessing(ctx, slot); err != nil {
		c.note("%s: %v", fault, err)
		return false
	}
	return true
}

// awaitRise waits up to a minute until slot's metric rises above before,
// and returns its value. It gives up early once the instance has started a
// new group session (dedup_rebalances_total above sessionsBefore) with the
// metric unchanged: a fenced or failed transaction is aborted before the
// member rejoins, so it had none open (its last commit came just before the
// stop or the cut, and nothing was processed after it).
func (c *chaos) awaitRise(ctx context.Context, slot int, metric string, before, sessionsBefore float64) (float64, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		v, err := c.fleet.metric(slot, metric)
		if err == nil && v > before {
			return v, nil
		}
		sessions, err2 := c.fleet.metric(slot, "dedup_rebalances_total")
		if err == nil && err2 == nil && sessions > sessionsBefore {
			// Read the metric again: the abort may have come just before the session.
			if v, err = c.fleet.metric(slot, metric); err == nil && v > before {
				return v, nil
			}
			return v, fmt.Errorf("rejoined the group with %s unchanged (%v): no open transaction", metric, v)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return v, fmt.Errorf("%s did not rise within a minute (%v, err %v)", metric, v, err)
		}
		time.Sleep(200 * time.Millisecond) // polling another process's metric
	}
}

// netPartition cuts w1, the instance that reaches the brokers through the
// fault proxy, off the brokers while it runs, until the group has dropped it
// (its session timed out and the others took its partitions), then
// reconnects it. Unlike a zombie it is not frozen: its loop goes on, and its
// requests fail (reset) or hang and arrive late (blackhole). Exactly-once,
// the transaction it held must be aborted.
func (c *chaos) netPartition(ctx context.Context) error {
	const slot = 0 // w1
	if !slices.Contains(c.fleet.wantedSlots(), slot) || len(c.fleet.running()) < 2 {
		// Scaling up starts the lowest idle slot first: w1 when it is idle.
		if err := c.scale(len(c.fleet.wantedSlots()) + 1); err != nil {
			return err
		}
	}
	run := c.fleet.running()
	if !slices.Contains(run, slot) || len(run) < 2 {
		c.note("network partition skipped: w1 and another instance must run (running %s)", slotNames(run))
		return nil
	}
	working := c.settle(ctx, "network partition", run, slot)
	abortedBefore, _ := c.fleet.metric(slot, "dedup_transactions_aborted_total")
	sessionsBefore, _ := c.fleet.metric(slot, "dedup_rebalances_total")
	how := "reset"
	if c.counts.netPartitions%2 == 1 {
		how = "blackhole"
		c.proxy.Blackhole()
	} else {
		c.proxy.Reset()
	}
	cut := time.Now()
	c.log("network of w1 cut (%s)", how)
	_, _, err := c.cluster.waitGroup(c.group, 2*time.Minute, func(n int, state string) bool {
		return n == len(run)-1 && state == "Stable" && time.Since(cut) > c.cfg.SessionTimeout
	})
	if err != nil {
		c.note("network partition: the group did not drop w1: %v", err)
	}
	c.proxy.Heal()
	c.counts.netPartitions++
	c.log("network of w1 back after %v (%s; dropped by the group)", time.Since(cut).Round(100*time.Millisecond), how)
	if c.mode != exactlyOnce || !working { // goka's runtime has no transaction to abort
		return nil
	}
	v, err := c.awaitRise(ctx, slot, "dedup_transactions_aborted_total", abortedBefore, sessionsBefore)
	if err != nil {
		c.note("network partition: w1 %v", err)
		return nil
	}
	c.counts.netAborted++
	c.log("w1's transaction aborted after the partition (dedup_transactions_aborted_total %v)", v)
	return nil
}

// wipe SIGKILLs an instance, deletes its state dir (LevelDB tables and
// instance id) and starts it again: a new instance that restores from Kafka.
func (c *chaos) wipe() error {
	run := c.fleet.running()
	if len(run) == 0 {
		c.note("wipe skipped: no instance running")
		return nil
	}
	slot := c.pick(run)
	p, err := c.fleet.kill(slot)
	if err != nil {
		return err
	}
	if err := c.fleet.wipe(slot); err != nil {
		return err
	}
	c.counts.wipes++
	if err := c.fleet.start(slot); err != nil {
		c.note("restart after wipe: %v", err)
	}
	c.log("SIGKILL w%d (incarnation %d), state dir deleted, restarted", slot+1, p.inc)
	return nil
}

// waitProcessing waits until slot's dedup_events_processed_total grows: for
// a minute, or for 5 s once the load has been produced. A fault applied late
// (the faults before it took longer than planned) can come after the load
// and the backlog, when no instance has anything left to process.
func (c *chaos) waitProcessing(ctx context.Context, slot int) error {
	first, err := c.fleet.metric(slot, "dedup_events_processed_total")
	deadline := time.Now().Add(time.Minute)
	loadDone := c.loadDone
	for {
		v, err2 := c.fleet.metric(slot, "dedup_events_processed_total")
		if err == nil && err2 == nil && v > first {
			return nil
		}
		select {
		case <-loadDone:
			if soon := time.Now().Add(5 * time.Second); soon.Before(deadline) {
				deadline = soon
			}
			loadDone = nil
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("w%d processed nothing for a minute (%v -> %v, %v %v)", slot+1, first, v, err, err2)
		}
		time.Sleep(100 * time.Millisecond) // polling another process's metric
	}
}

func (c *chaos) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	c.counts.notes = append(c.counts.notes, s)
	c.log("NOTE %s", s)
}

func (fc *faultCounts) String() string {
	path := make([]string, len(fc.scalePath))
	for i, n := range fc.scalePath {
		path[i] = fmt.Sprint(n)
	}
	s := fmt.Sprintf("%d SIGKILL+restart, %d scale steps (%s instances), %d broker SIGKILLs", fc.kills, fc.scaleSteps, strings.Join(path, "->"), fc.brokerKills)
	if len(fc.brokerDowntime) > 0 {
		s += " (" + strings.Join(fc.brokerDowntime, ", ") + ")"
	}
	s += fmt.Sprintf(", %d zombie", fc.zombies)
	if fc.zombies > 0 {
		s += fmt.Sprintf(" (fenced %d times)", fc.fenced)
	}
	s += fmt.Sprintf(", w1 cut off the brokers %d times", fc.netPartitions)
	if fc.netPartitions > 0 {
		s += fmt.Sprintf(" (its transaction aborted after %d)", fc.netAborted)
	}
	return s + fmt.Sprintf(", %d state-dir wipe", fc.wipes)
}
