package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dedupkit/dedup/bench/contenders"
	"github.com/dedupkit/dedup/bench/loadgen"
	"github.com/dedupkit/dedup/bench/watch"
)

// ScenarioResult is one scenario of one contender: every repetition's gap
// (and stall of the unmoved partitions) and the exactly-once check of the
// whole scenario's output.
type ScenarioResult struct {
	Contender string
	Scenario  string
	Gaps      []time.Duration
	Stalls    []time.Duration
	Pauses    []time.Duration // of the affected partitions
	// Handovers and HandoverPauses: scale out, until the new instance held
	// its share of every topic (eventMeasure.Handover); none when the
	// contender does not hand it over within the event.
	Handovers, HandoverPauses []time.Duration
	// Affected partitions per event (input and internal topics alike).
	Affected []int
	Produced int // input records of the steady load
	Correct  watch.Correctness
	Err      string
}

// Clean reports an exactly-once output and no error.
func (r *ScenarioResult) Clean() bool {
	c := r.Correct
	return r.Err == "" && c.Expected > 0 && c.Missing == 0 && c.Duplicates == 0 && c.Unexpected == 0
}

// FailoverReport is everything one failover run measured.
type FailoverReport struct {
	Config FailoverConfig
	// Commit is the checkout's git describe at the start (before the run
	// writes its doc and chart, which would mark it dirty).
	Commit   string
	Started  time.Time
	Finished time.Time
	Machine  Machine
	Results  []ScenarioResult
}

// Clean reports that every scenario ran and its output was exactly-once.
func (r *FailoverReport) Clean() bool {
	for i := range r.Results {
		if !r.Results[i].Clean() {
			return false
		}
	}
	return len(r.Results) > 0
}

// RunFailover runs every selected scenario for every selected contender.
// It returns the report also when a scenario failed (its Err says why).
func RunFailover(ctx context.Context, cfg FailoverConfig) (*FailoverReport, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("failover: %w", err)
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return nil, err
	}
	b := make([]byte, 3)
	rand.Read(b)
	// The workers' liveness connections, as a deployment runs them: with a
	// secret of the group (processor run's --peer-secret-file), which the
	// contender takes from the same variable as the binary.
	secret := make([]byte, 48)
	rand.Read(secret)
	env := append(slices.Clip(cfg.ExeEnv), contenders.PeerSecretEnv+"="+hex.EncodeToString(secret))
	h := &harness{cfg: Config{Brokers: cfg.Brokers, Exe: cfg.Exe, ExeArgs: cfg.ExeArgs, ExeEnv: env,
		WorkDir: cfg.WorkDir, Log: cfg.Log}, runID: hex.EncodeToString(b)}
	rep := &FailoverReport{Config: cfg, Commit: gitCommit(), Started: time.Now(), Machine: describeMachine(cfg.KafkaData)}
	var err error
	if h.admin, err = newAdmin(cfg.Brokers); err != nil {
		return nil, err
	}
	defer h.admin.Close()
	cts, scs := cfg.selected()
	for _, ct := range cts {
		if ct.Kind != contenders.KStreams {
			continue
		}
		// Built before anything is measured, when missing or stale.
		if _, err := contenders.BuildKStreams(ctx, logWriter(func(s string) { cfg.logf("%s", strings.TrimSpace(s)) })); err != nil {
			return nil, fmt.Errorf("failover: %w", err)
		}
		break
	}
	for _, ct := range cts {
		for _, sc := range scs {
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
			f := &failover{h: h, cfg: &cfg, ct: ct, sc: sc}
			r := f.run(ctx)
			g50, gmax := quantiles(r.Gaps)
			cfg.logf("%s %s: gap p50 %v max %v over %d events; %d outputs, %d missing, %d duplicated %s", ct.Name, sc.Name,
				g50, gmax, len(r.Gaps), r.Correct.Outputs, r.Correct.Missing, r.Correct.Duplicates, r.Err)
			rep.Results = append(rep.Results, r)
		}
	}
	rep.Finished = time.Now()
	return rep, nil
}

// failover is one scenario of one contender while it runs.
type failover struct {
	h        *harness
	cfg      *FailoverConfig
	ct       FailoverContender
	sc       Scenario
	group    string
	input    string
	output   string
	stateDir string
	pol      *poller
	// running instances by instance ID; ids is the group at rest.
	running map[string]*child
	ids     []string
	// rest: the member identities of the group at rest.
	rest []string
}

func (f *failover) run(ctx context.Context) (r ScenarioResult) {
	r = ScenarioResult{Contender: f.ct.Name, Scenario: f.sc.Name}
	f.group = f.h.name("fo", f.ct.Name, f.sc.Name)
	f.input, f.output = f.group+"-in", f.group+"-out"
	f.stateDir = filepath.Join(f.cfg.WorkDir, "state", f.group)
	f.running = map[string]*child{}
	for i := 0; i < f.cfg.Instances; i++ {
		f.ids = append(f.ids, fmt.Sprintf("i%d", i))
	}
	defer f.cleanup()
	if err := f.prepare(ctx); err != nil {
		r.Err = err.Error()
		return r
	}
	plan, err := f.plan()
	if err != nil {
		r.Err = err.Error()
		return r
	}
	f.pol = startPoller(f.h.admin, f.group, f.cfg.PollInterval)
	defer f.pol.stop()
	w, err := watch.Start(watch.Config{Brokers: f.cfg.Brokers, Output: f.output, Plan: plan})
	if err != nil {
		r.Err = err.Error()
		return r
	}
	defer w.Stop()
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	type loadResult struct {
		n   int
		err error
	}
	loaded, loadEnded := make(chan loadResult, 1), make(chan struct{})
	go func() { // owned by run: stopLoad ends it, run waits for it below
		n, err := loadgen.ProduceUntil(loadCtx, f.cfg.Brokers, f.input, plan, float64(f.cfg.Rate))
		close(loadEnded)
		loaded <- loadResult{n, err}
	}()
	f.cfg.logf("%s %s: steady load of %d events/s on %s", f.ct.Name, f.sc.Name, f.cfg.Rate, f.input)
	err = f.events(ctx, loadEnded, &r)
	stopLoad()
	lr := <-loaded
	r.Produced = lr.n
	if err == nil && lr.err != nil {
		err = fmt.Errorf("load: %w", lr.err)
	}
	if err == nil {
		r.Correct, err = f.verify(ctx, w, lr.n)
	}
	if err != nil {
		r.Err = err.Error()
	}
	return r
}

// prepare creates the topics, fills the table and starts the group at rest.
func (f *failover) prepare(ctx context.Context) error {
	topics := []topicSpec{{f.input, inputTopicConfig}, {f.output, nil}}
	if f.ct.Kind == contenders.Exactly {
		topics = append(topics, topicSpec{f.group + "-table", tableTopicConfig}, topicSpec{f.group + "-loop", nil},
			topicSpec{f.group + "-dlq", nil})
	}
	for _, t := range topics {
		if err := f.h.admin.createTopic(t.name, f.cfg.Partitions, t.cfg); err != nil {
			return err
		}
	}
	if err := f.prefill(ctx); err != nil {
		return err
	}
	for _, id := range f.ids {
		if _, err := f.start(id); err != nil {
			return err
		}
	}
	for _, id := range f.ids {
		if err := f.running[id].waitReady(20 * time.Minute); err != nil {
			return err
		}
	}
	f.cfg.logf("%s %s: %d instances ready", f.ct.Name, f.sc.Name, len(f.ids))
	return nil
}

// prefill gives the table its IDs seen records, written straight to the
// changelog each instance restores its partitions from: the table the
// group would have after processing that many distinct events, minus the
// time that takes. The worker's changelog is <group>-table (keyed like the
// worker keys them, so each lands in the partition that event would);
// Kafka Streams' is <application id>-table-changelog (fillKStreamsTable).
func (f *failover) prefill(ctx context.Context) error {
	if f.cfg.IDs == 0 {
		return nil
	}
	start := time.Now()
	var topic string
	var err error
	switch f.ct.Kind {
	case contenders.Exactly:
		topic = f.group + "-table"
		err = fillTable(ctx, f.cfg.Brokers, topic, f.h.runID+"-prefill", f.cfg.IDs)
	case contenders.KStreams:
		topic = f.group + "-" + kstreamsStore + "-changelog"
		if err = f.h.admin.createTopic(topic, f.cfg.Partitions, tableTopicConfig); err == nil {
			err = fillKStreamsTable(ctx, f.cfg.Brokers, topic, f.h.runID+"-prefill", f.cfg.IDs)
		}
	default:
		err = fmt.Errorf("-ids %d: no way to fill the table of a %s contender", f.cfg.IDs, f.ct.Kind)
	}
	if err != nil {
		return err
	}
	f.cfg.logf("%s %s: %d seen IDs written to %s in %v", f.ct.Name, f.sc.Name, f.cfg.IDs, topic,
		time.Since(start).Round(time.Millisecond))
	return nil
}

// plan is the steady load: more records than the scenario can take at the
// rate, of which the load writes the first ones until it is stopped. Late
// duplicates come 5-30 s after their original, so the written part holds
// the duplicate share whatever its length.
func (f *failover) plan() (*loadgen.Plan, error) {
	seconds := 60 + f.cfg.Repeat*int(2*f.cfg.EventTimeout/time.Second)
	n := f.cfg.Rate * seconds
	return loadgen.NewPlan(loadgen.Spec{Records: n, DupRate: f.cfg.DupRate, PayloadBytes: 200, Seed: 42,
		RunID: f.h.runID + f.group, LateMin: float64(5*f.cfg.Rate) / float64(n), LateMax: float64(30*f.cfg.Rate) / float64(n)})
}

// start runs instance id of the contender (its state dir and identity kept
// across restarts).
func (f *failover) start(id string) (*child, error) {
	args := []string{"-kind", string(f.ct.Kind), "-brokers", strings.Join(f.cfg.Brokers, ","),
		"-input", f.input, "-output", f.output, "-group", f.group,
		"-commit-interval", f.cfg.CommitInterval.String(), "-session-timeout", f.cfg.SessionTimeout.String(),
		"-group-instance-id", id, "-state-dir", filepath.Join(f.stateDir, id)}
	if f.ct.Kind == contenders.Exactly {
		args = append(args, "-standby-status-file", f.standbyFile(id))
	}
	if f.cfg.ContenderLogLevel != "" {
		args = append(args, "-log-level", f.cfg.ContenderLogLevel)
	}
	args = append(args, f.ct.Args...)
	name := fmt.Sprintf("%s-%s", f.ct.Name, id)
	c, err := f.h.startChild(name, args, filepath.Join(f.cfg.WorkDir, fmt.Sprintf("%s-%s-%d.log", f.group, id, time.Now().UnixMilli())), nil)
	if err != nil {
		return nil, err
	}
	f.running[id] = c
	return c, nil
}

func (f *failover) cleanup() {
	for id, c := range f.running {
		if err := c.stop(); err != nil {
			f.cfg.logf("stopping %s: %v", id, err)
		}
	}
	// The group's topics: the input and output, the worker's table, loop and
	// dead letters, Kafka Streams' changelog and repartition topics.
	if topics, err := f.h.admin.ca.ListTopics(); err == nil {
		for name := range topics {
			if strings.HasPrefix(name, f.group+"-") {
				f.h.admin.deleteTopics(name)
			}
		}
	}
	os.RemoveAll(f.stateDir)
}

// verify waits until the group committed the whole written input and the
// outputs of its events are visible, then checks that each is there once
// and nothing else is.
func (f *failover) verify(ctx context.Context, w *watch.Watcher, produced int) (watch.Correctness, error) {
	ends, err := f.h.admin.endOffsets(f.input)
	if err != nil {
		return watch.Correctness{}, err
	}
	deadline := time.Now().Add(f.cfg.EventTimeout)
	err = f.await(ctx, deadline, func() bool { return f.h.admin.committed(f.group, f.input, ends) })
	if err != nil {
		return w.CorrectnessUpTo(produced), fmt.Errorf("input not committed: %w", err)
	}
	err = f.await(ctx, deadline, func() bool { return w.CorrectnessUpTo(produced).Missing == 0 })
	for quiet := time.Now().Add(10 * time.Second); time.Since(w.Progress().LastAny) < time.Second && time.Now().Before(quiet); {
		time.Sleep(100 * time.Millisecond)
	}
	w.Stop()
	c := w.CorrectnessUpTo(produced)
	if err != nil || c.Missing > 0 || c.Duplicates > 0 || c.Foreign > 0 || c.Unexpected > 0 {
		return c, fmt.Errorf("NOT EXACTLY-ONCE: %d of %d events missing, %d duplicated, %d unexpected, %d outputs "+
			"without a header (%v)", c.Missing, c.Expected, c.Duplicates, c.Unexpected, c.Foreign, err)
	}
	return c, nil
}

// await checks cond after every sample of the group until it holds, an
// instance exits on its own, or the deadline passes.
func (f *failover) await(ctx context.Context, deadline time.Time, cond func() bool) error {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		if cond() {
			return nil
		}
		for id, c := range f.running {
			if err := c.exited(); err != nil {
				delete(f.running, id)
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			if cond() {
				return nil
			}
			return errors.New("timed out")
		case <-f.pol.notify:
		}
	}
}

// identities maps instance IDs to the member identities in s: a member is
// an instance's when its identity is the ID or holds it between dashes
// (the worker's static member is <group>-<instance>-<thread>).
func identities(s *groupSample, ids []string) ([]string, bool) {
	var out []string
	for _, id := range ids {
		found := ""
		for _, m := range s.members {
			if m == id || strings.HasSuffix(m, "-"+id) || strings.Contains(m, "-"+id+"-") || strings.HasPrefix(m, id+"-") {
				found = m
				break
			}
		}
		if found == "" {
			return nil, false
		}
		out = append(out, found)
	}
	slices.Sort(out)
	return out, true
}

// standbyFile is where instance id keeps its standbys' status (a worker
// with standby replicas; see contenders.standbyStatus).
func (f *failover) standbyFile(id string) string {
	return filepath.Join(f.stateDir, id+".standbys")
}

// standbysCaughtUp reports whether every instance of ids that keeps
// standby replicas has them caught up: a takeover is measured against warm
// standbys, as a group at rest has them. An instance that keeps none
// writes no file.
func (f *failover) standbysCaughtUp(ids []string) bool {
	for _, id := range ids {
		b, err := os.ReadFile(f.standbyFile(id))
		if err != nil {
			continue
		}
		if strings.TrimSpace(string(b)) != "behind 0" {
			return false
		}
	}
	return true
}
