package harness

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/dedupkit/dedup/bench/loadgen"
	"github.com/dedupkit/dedup/bench/watch"
)

// waitDone waits until every expected output is visible, then until the
// group committed the whole input and no output arrived for a second (so
// late duplicates are counted). It returns when the last new output became
// visible. Without progress for a minute after the input was committed, or
// after RunTimeout, it gives up: outputs are missing. warm, unless nil, is
// called once, when a fifth of the expected outputs is visible (the start of
// the warm figures: JIT, caches and the first rebalance behind).
func (h *harness) waitDone(ctx context.Context, c *child, w *watch.Watcher, group, input string, ends map[int32]int64, t0 time.Time,
	warm func(watch.Progress)) (time.Time, error) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	lastDistinct, lastChange := -1, time.Now()
	for {
		select {
		case <-ctx.Done():
			return time.Now(), ctx.Err()
		case <-tick.C:
		}
		if err := c.exited(); err != nil {
			return w.Progress().LastNew, err
		}
		p := w.Progress()
		if warm != nil && p.Expected > 0 && 5*p.Distinct >= p.Expected {
			warm(p)
			warm = nil
		}
		if p.Distinct >= p.Expected {
			break
		}
		if p.Distinct != lastDistinct {
			lastDistinct, lastChange = p.Distinct, time.Now()
		}
		stalled := time.Since(lastChange) > time.Minute
		if stalled && h.admin.committed(group, input, ends) || time.Since(t0) > h.cfg.RunTimeout {
			return p.LastNew, fmt.Errorf("incomplete: %d of %d expected outputs after %v", p.Distinct, p.Expected,
				time.Since(t0).Round(time.Second))
		}
	}
	end := w.Progress().LastNew
	deadline := time.Now().Add(time.Minute)
	for !h.admin.committed(group, input, ends) {
		if time.Now().After(deadline) {
			return end, errors.New("all outputs visible but the input offsets were not committed within a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for quiet := time.Now().Add(10 * time.Second); time.Since(w.Progress().LastAny) < time.Second && time.Now().Before(quiet); {
		time.Sleep(100 * time.Millisecond)
	}
	return end, nil
}

// latencyRun starts the contender on an empty input and writes a fresh plan
// at the offered rate while it runs.
func (h *harness) latencyRun(ctx context.Context, ct Contender) LatencyResult {
	lr := LatencyResult{Contender: ct.Name, Offered: h.cfg.Rate}
	plan, err := h.newPlan(max(1, int(float64(h.cfg.Rate)*h.cfg.LatencySeconds)), "l"+ct.Name, ct.KeyByEvent)
	if err != nil {
		lr.Err = err.Error()
		return lr
	}
	lr.Records = plan.Len()
	group, output, stateDir, cleanup, err := h.prepare(ctx, ct, "lat")
	defer cleanup()
	input := group + "-in"
	defer h.admin.deleteTopics(input)
	if err == nil {
		err = h.admin.createTopic(input, h.cfg.Partitions, inputTopicConfig)
	}
	if err != nil {
		lr.Err = err.Error()
		return lr
	}
	w, err := watch.Start(watch.Config{Brokers: h.cfg.Brokers, Output: output, Input: input, Plan: plan, ByRecord: ct.ByRecord})
	if err != nil {
		lr.Err = err.Error()
		return lr
	}
	defer w.Stop()
	c, err := h.startChild(ct.Name, h.contenderArgs(ct, input, output, group, stateDir), filepath.Join(h.cfg.WorkDir, group+".log"), nil)
	if err != nil {
		lr.Err = err.Error()
		return lr
	}
	defer c.stop()
	if err := c.waitReady(3 * time.Minute); err != nil {
		lr.Err = err.Error()
		return lr
	}
	// Let the group member's first fetches and the producer's first
	// transaction settle: the figure is steady-state latency.
	time.Sleep(h.cfg.LatencyWarmup)
	h.cfg.logf("%-20s latency: %d records at %d/s", ct.Name, plan.Len(), h.cfg.Rate)
	t0 := time.Now()
	if err := loadgen.Produce(ctx, h.cfg.Brokers, input, plan, float64(h.cfg.Rate)); err != nil {
		lr.Err = err.Error()
		return lr
	}
	ends, err := h.admin.endOffsets(input)
	if err == nil {
		_, err = h.waitDone(ctx, c, w, group, input, ends, t0, nil)
	}
	if err != nil {
		lr.Err = err.Error()
	}
	if stopErr := c.stop(); stopErr != nil && lr.Err == "" {
		lr.Err = stopErr.Error()
	}
	w.Stop()
	lr.Correct = w.Correctness()
	if msg := h.checkDatabase(ctx, ct, group, plan.Distinct(), &lr.Correct); msg != "" {
		lr.Err = strings.TrimPrefix(lr.Err+"; "+msg, "; ")
	}
	lr.Latencies = w.Latencies()
	h.cfg.logf("%-20s latency: p50 %v p99 %v max %v (%d samples)", ct.Name, lr.Percentile(0.5), lr.Percentile(0.99),
		lr.Percentile(1), len(lr.Latencies))
	return lr
}
