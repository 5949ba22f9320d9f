package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/dedupkit/dedup/bench/contenders"
	"github.com/dedupkit/dedup/bench/loadgen"
	"github.com/dedupkit/dedup/bench/procstat"
	"github.com/dedupkit/dedup/bench/watch"
)

// RestoreResult is the restore of one partition's table on a fresh instance.
type RestoreResult struct {
	Records int64
	Seconds float64 // first session start to the last record applied
	Rate    float64 // records per second
	Err     string
}

// HoldResult is the worker holding many seen IDs.
type HoldResult struct {
	Records        int64
	Partitions     int32
	RestoreSeconds float64
	// RSS after the restore and after processing events on top; PeakRSS is
	// VmHWM (the restore's peak included).
	RSSRestored, RSSAfter, PeakRSS int64
	StateBytes                     int64 // LevelDB files on disk
	ChangelogBytes                 int64 // the table topic on the broker, -1 unknown
	Processed                      int   // events processed on top
	// MemoryLimit is the hard limit of the worker's cgroup (0: none; then
	// LimitNote says why); OOMKills counts the kernel's kills in it.
	MemoryLimit int64
	LimitNote   string
	OOMKills    int
	Err         string
}

// restore fills a one-partition table topic with RestoreRecords seen IDs
// and times a fresh exactly-once instance restoring it.
func (h *harness) restore(ctx context.Context, rep *Report) *RestoreResult {
	res := &RestoreResult{}
	group := h.name("restore")
	if err := h.fillAndRestore(ctx, group, 1, h.cfg.RestoreRecords, nil, func(c *child, _ string) error {
		res.Records, res.Seconds = c.restoredRecords, c.restoredSeconds
		return nil
	}); err != nil {
		res.Err = err.Error()
		rep.Errors = append(rep.Errors, "restore: "+res.Err)
	}
	if res.Seconds > 0 {
		res.Rate = float64(res.Records) / res.Seconds
	}
	h.cfg.logf("restore: %d records in %.2fs (%.0f records/s) %s", res.Records, res.Seconds, res.Rate, res.Err)
	return res
}

// hold has an exactly-once instance restore HoldRecords seen IDs over all
// partitions, process a few thousand events on top, and reads its memory
// and disk.
func (h *harness) hold(ctx context.Context, rep *Report) *HoldResult {
	res := &HoldResult{Records: int64(h.cfg.HoldRecords), Partitions: h.cfg.Partitions, ChangelogBytes: -1}
	group := h.name("hold")
	var cg *memCgroup
	if limit := h.cfg.HoldMemoryLimit; limit > 0 {
		var err error
		if cg, err = newMemCgroup(group, limit); err != nil {
			res.LimitNote = "not enforced: " + err.Error()
		} else {
			res.MemoryLimit = limit
		}
	}
	err := h.fillAndRestore(ctx, group, h.cfg.Partitions, h.cfg.HoldRecords, cg, func(c *child, input string) error {
		res.RestoreSeconds = c.restoredSeconds
		mem, err := procstat.ReadMemory(c.pid())
		if err != nil {
			return err
		}
		res.RSSRestored = mem.RSS
		n, err := h.processOnTop(ctx, c, group, input)
		res.Processed = n
		if err != nil {
			return err
		}
		if mem, err = procstat.ReadMemory(c.pid()); err != nil {
			return err
		}
		res.RSSAfter, res.PeakRSS = mem.RSS, mem.PeakRSS
		res.StateBytes, err = procstat.DirSize(filepath.Join(h.cfg.WorkDir, "state", group))
		res.ChangelogBytes = topicDiskBytes(h.cfg.KafkaData, group+"-table")
		return err
	})
	if cg != nil { // the worker has exited (fillAndRestore stops it)
		var oomErr error
		res.OOMKills, oomErr = cg.close(h.cfg.logf)
		err = errors.Join(err, oomErr)
	}
	if err != nil {
		res.Err = err.Error()
		rep.Errors = append(rep.Errors, "hold: "+res.Err)
	}
	h.cfg.logf("hold: %d seen IDs: rss %s (after restore %s, peak %s), state %s, changelog %s, memory limit %s%s (OOM kills %d) %s", res.Records,
		mib(res.RSSAfter), mib(res.RSSRestored), mib(res.PeakRSS), mib(res.StateBytes), mib(res.ChangelogBytes),
		mib(res.MemoryLimit), res.LimitNote, res.OOMKills, res.Err)
	return res
}

// fillAndRestore writes records seen IDs to <group>-table, starts a fresh
// exactly-once instance on an empty input of that many partitions, waits
// until it restored (READY) and calls fn while it runs.
// cg, when not nil, is the memory cgroup the instance runs in.
func (h *harness) fillAndRestore(ctx context.Context, group string, partitions int32, records int, cg *memCgroup,
	fn func(c *child, input string) error) error {
	input, output, table := group+"-in", group+"-out", group+"-table"
	stateDir := filepath.Join(h.cfg.WorkDir, "state", group)
	defer func() {
		h.admin.deleteTopics(input, output, table, group+"-loop", group+"-dlq")
		os.RemoveAll(stateDir)
	}()
	for _, t := range []topicSpec{{input, inputTopicConfig}, {output, nil}, {table, tableTopicConfig}} {
		if err := h.admin.createTopic(t.name, partitions, t.cfg); err != nil {
			return err
		}
	}
	start := time.Now()
	if err := fillTable(ctx, h.cfg.Brokers, table, h.runID+group, records); err != nil {
		return err
	}
	h.cfg.logf("%s: wrote %d seen records to %s in %v", group, records, table, time.Since(start).Round(time.Millisecond))
	ct := Contender{Name: "exactly-once-100ms", Kind: contenders.Exactly, CommitInterval: 100 * time.Millisecond}
	c, err := h.startChild(group, h.contenderArgs(ct, input, output, group, stateDir), filepath.Join(h.cfg.WorkDir, group+".log"), cg)
	if err != nil {
		return err
	}
	defer c.stop()
	if err := c.waitReady(20 * time.Minute); err != nil {
		return err
	}
	if c.restoredRecords != int64(records) {
		return fmt.Errorf("restored %d records, want %d", c.restoredRecords, records)
	}
	return fn(c, input)
}

// processOnTop writes a small plan to the input of a running instance and
// waits for its outputs.
func (h *harness) processOnTop(ctx context.Context, c *child, group, input string) (int, error) {
	plan, err := h.newPlan(int(h.cfg.Partitions)*1000, "hold", false)
	if err != nil {
		return 0, err
	}
	w, err := watch.Start(watch.Config{Brokers: h.cfg.Brokers, Output: group + "-out", Plan: plan})
	if err != nil {
		return 0, err
	}
	defer w.Stop()
	if err := loadgen.Produce(ctx, h.cfg.Brokers, input, plan, 0); err != nil {
		return 0, err
	}
	ends, err := h.admin.endOffsets(input)
	if err != nil {
		return 0, err
	}
	_, err = h.waitDone(ctx, c, w, group, input, ends, time.Now(), nil)
	return plan.Len(), err
}

// profileRun is one more exactly-once (100 ms) throughput run (at most 300k
// records) with a CPU profile of the worker process; it returns
// `go tool pprof -top` output.
func (h *harness) profileRun(ctx context.Context, rep *Report) string {
	plan, err := h.newPlan(min(h.cfg.Records, 300_000), "p", false) // enough samples for a profile
	if err != nil {
		return err.Error()
	}
	input := h.name("prof-in")
	if err := h.admin.createTopic(input, h.cfg.Partitions, inputTopicConfig); err != nil {
		return err.Error()
	}
	defer h.admin.deleteTopics(input)
	if err := loadgen.Produce(ctx, h.cfg.Brokers, input, plan, 0); err != nil {
		return err.Error()
	}
	ends, err := h.admin.endOffsets(input)
	if err != nil {
		return err.Error()
	}
	ct := contenderNamed("exactly-once-100ms")
	profile := filepath.Join(h.cfg.WorkDir, "exactly-once.cpu.pprof")
	r := h.throughputRunWith(ctx, ct, 0, input, ends, plan, []string{"-cpuprofile", profile})
	h.cfg.logf("profiled run: %.0f events/s (profile %s) %s", r.Throughput, profile, r.Err)
	if shares, err := profileShares(profile); err == nil {
		rep.ProfileShares = shares
	} else {
		h.cfg.logf("profile shares: %v", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "profiled run: %.0f events/s, %.1f CPU s for %d records\n\n", r.Throughput, r.CPU, r.Records)
	for _, args := range [][]string{{"-top", "-nodecount=25"}, {"-top", "-cum", "-nodecount=40"}} {
		out, err := exec.CommandContext(ctx, "go", append(append([]string{"tool", "pprof"}, args...), profile)...).CombinedOutput()
		if err != nil {
			fmt.Fprintf(&b, "go tool pprof %v: %v\n", args, err)
		}
		b.Write(out)
		b.WriteString("\n")
	}
	return b.String()
}
