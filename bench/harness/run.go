package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/dedupkit/dedup/bench/contenders"
	"github.com/dedupkit/dedup/bench/loadgen"
	"github.com/dedupkit/dedup/bench/procstat"
	"github.com/dedupkit/dedup/bench/services"
	"github.com/dedupkit/dedup/bench/watch"
)

type harness struct {
	cfg       Config
	runID     string
	admin     *admin
	brokerPID int
	redis     *services.Redis
	postgres  *services.Postgres
	seq       int
}

// RunResult is one throughput run of one contender.
type RunResult struct {
	Contender string
	Run       int
	Records   int
	// Seconds from READY (partitions held, input already written) to the
	// last new output becoming visible to a read_committed consumer.
	Seconds    float64
	Throughput float64 // input records per second
	// CPU seconds over those Seconds: the contender process, and the
	// broker, redis-server and PostgreSQL (postmaster and backends).
	CPU, BrokerCPU, RedisCPU, PostgresCPU float64
	PeakRSS                               int64 // VmHWM of the contender process
	Correct                               watch.Correctness
	// Warm: the same from the moment the watcher had seen a fifth of the
	// distinct events to the end: WarmRecords (the input share not yet
	// output then, in records), their seconds and the contender's CPU.
	WarmRecords, WarmSeconds, WarmThroughput, WarmCPU float64
	// Exactly-once only: transactions committed over the process's life,
	// the seconds its processing loop spent in them, records they carried.
	Commits       int
	CommitSeconds float64
	CommitRecords int
	// Inbox (postgres-inbox only): the database time of the process's life,
	// summed over its members.
	Inbox contenders.InboxStats
	Err   string
}

// LatencyResult is one latency run: a fixed offered load.
type LatencyResult struct {
	Contender string
	Offered   int // records per second
	Records   int
	Latencies []time.Duration // sorted
	Correct   watch.Correctness
	Err       string
}

// Percentile of the sorted latencies, q in [0,1].
func (l *LatencyResult) Percentile(q float64) time.Duration {
	if len(l.Latencies) == 0 {
		return 0
	}
	i := int(q*float64(len(l.Latencies)-1) + 0.5)
	return l.Latencies[i]
}

// Report is everything one benchmark run measured.
type Report struct {
	Config Config
	// Commit is the checkout's git describe at the start (before the run
	// writes its doc and charts, which would mark it dirty).
	Commit    string
	RunID     string
	Started   time.Time
	Finished  time.Time
	Machine   Machine
	InputRate float64 // records/s the load generator wrote the input at
	Runs      []RunResult
	Latency   []LatencyResult
	Restore   *RestoreResult
	Hold      *HoldResult
	HotPath   string // go test -bench output
	Profile   string // pprof -top of the exactly-once worker
	// ProfileShares: cumulative CPU share (%) per function of that profile.
	ProfileShares map[string]float64
	Versions      map[string]string
	Errors        []string
}

// CheckServices reports whether the Redis and PostgreSQL servers are there
// (installing them first when install is set).
func CheckServices(ctx context.Context, install bool, log func(string)) error {
	_, err := services.Ensure(ctx, install, logWriter(log))
	return err
}

// Run runs the benchmark and returns its report (also when some runs
// failed: their errors are in the report).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return nil, err
	}
	b := make([]byte, 3)
	rand.Read(b)
	h := &harness{cfg: cfg, runID: hex.EncodeToString(b), brokerPID: brokerPID(cfg.KafkaData)}
	rep := &Report{Config: cfg, Commit: gitCommit(), RunID: h.runID, Started: time.Now(), Versions: map[string]string{}}
	rep.Machine = describeMachine(cfg.KafkaData)
	var err error
	if h.admin, err = newAdmin(cfg.Brokers); err != nil {
		return nil, err
	}
	defer h.admin.Close()
	if err := h.startServices(ctx, rep); err != nil {
		return nil, err
	}
	defer h.stopServices()

	if err := h.buildKStreams(ctx, rep); err != nil {
		return nil, err
	}
	if cfg.HotPath {
		cfg.logf("hot-path benchmarks (go test -bench)")
		rep.HotPath = runHotPath(ctx, cfg)
	}
	if err := h.throughput(ctx, rep); err != nil {
		return rep, err
	}
	for _, ct := range cfg.selected() {
		lr := h.latencyRun(ctx, ct)
		if lr.Err != "" {
			rep.Errors = append(rep.Errors, ct.Name+" latency: "+lr.Err)
		}
		rep.Latency = append(rep.Latency, lr)
	}
	if cfg.Profile {
		rep.Profile = h.profileRun(ctx, rep)
	}
	if cfg.RestoreRecords > 0 {
		rep.Restore = h.restore(ctx, rep)
	}
	if cfg.HoldRecords > 0 {
		rep.Hold = h.hold(ctx, rep)
	}
	rep.Finished = time.Now()
	return rep, ctx.Err()
}

func (h *harness) startServices(ctx context.Context, rep *Report) error {
	var needRedis, needPG bool
	for _, ct := range h.cfg.selected() {
		needRedis = needRedis || ct.Kind == contenders.Redis
		needPG = needPG || ct.usesPostgres()
	}
	if !needRedis && !needPG {
		return nil
	}
	bins, err := services.Ensure(ctx, h.cfg.InstallServices, logWriter(func(s string) { h.cfg.logf("%s", strings.TrimSpace(s)) }))
	if err != nil {
		return fmt.Errorf("bench: redis/postgres: %w", err)
	}
	if needRedis {
		dir := filepath.Join(h.cfg.WorkDir, "redis")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if h.redis, err = services.StartRedis(ctx, bins.Redis, dir, h.cfg.RedisPort); err != nil {
			return err
		}
		rep.Versions["redis"] = h.redis.Version
		h.cfg.logf("redis-server up on %s (pid %d)", h.redis.Addr, h.redis.Pid())
	}
	if needPG {
		dir := filepath.Join(h.cfg.WorkDir, "postgres")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if h.postgres, err = services.StartPostgres(ctx, bins, dir, h.cfg.PostgresPort); err != nil {
			h.stopServices()
			return err
		}
		rep.Versions["postgres"] = h.postgres.Version
		h.cfg.logf("postgres up: %s (pid %d)", h.postgres.DSN, h.postgres.Pid())
		if err := contenders.EnsureSchema(ctx, h.postgres.DSN); err != nil {
			h.stopServices()
			return err
		}
	}
	return nil
}

func (h *harness) stopServices() {
	if h.redis != nil {
		if err := h.redis.Stop(); err != nil {
			h.cfg.logf("stopping redis: %v", err)
		}
		h.redis = nil
	}
	if h.postgres != nil {
		if err := h.postgres.Stop(); err != nil {
			h.cfg.logf("stopping postgres: %v", err)
		}
		h.postgres = nil
	}
}

// name returns a topic/group name unique to this run.
func (h *harness) name(parts ...string) string {
	h.seq++
	return fmt.Sprintf("bench-%s-%s-%d", h.runID, strings.Join(parts, "-"), h.seq)
}

func (h *harness) newPlan(records int, tag string, byEvent bool) (*loadgen.Plan, error) {
	return loadgen.NewPlan(loadgen.Spec{Records: records, DupRate: h.cfg.DupRate, PayloadBytes: h.cfg.PayloadBytes,
		Seed: 42, RunID: h.runID + tag, KeyByEvent: byEvent})
}

// input is one written input topic of the throughput runs.
type input struct {
	topic string
	plan  *loadgen.Plan
	ends  map[int32]int64
}

// writeInput writes a plan of records to a new input topic.
func (h *harness) writeInput(ctx context.Context, records int, tag string, byEvent bool) (*input, float64, error) {
	plan, err := h.newPlan(records, tag, byEvent)
	if err != nil {
		return nil, 0, err
	}
	in := &input{topic: h.name("in", tag), plan: plan}
	if err := h.admin.createTopic(in.topic, h.cfg.Partitions, inputTopicConfig); err != nil {
		return nil, 0, err
	}
	h.cfg.logf("writing %d records (%d distinct events) to %s", plan.Len(), plan.Distinct(), in.topic)
	start := time.Now()
	if err := loadgen.Produce(ctx, h.cfg.Brokers, in.topic, plan, 0); err != nil {
		return nil, 0, err
	}
	rate := float64(plan.Len()) / time.Since(start).Seconds()
	h.cfg.logf("input written in %v (%.0f records/s)", time.Since(start).Round(time.Millisecond), rate)
	in.ends, err = h.admin.endOffsets(in.topic)
	return in, rate, err
}

// throughput writes the input once (and a smaller one for the slow
// contenders when SlowRecords says so) and has every contender read it Runs
// times, round-robin so slow drifts of the machine spread over all.
func (h *harness) throughput(ctx context.Context, rep *Report) error {
	type inputKey struct {
		records int
		byEvent bool
	}
	inputs := map[inputKey]*input{}
	defer func() {
		for _, in := range inputs {
			h.admin.deleteTopics(in.topic)
		}
	}()
	for _, ct := range h.cfg.selected() {
		k := inputKey{h.cfg.recordsFor(ct), ct.KeyByEvent}
		if inputs[k] != nil {
			continue
		}
		in, rate, err := h.writeInput(ctx, k.records, fmt.Sprintf("t%d%v", k.records, k.byEvent), k.byEvent)
		if in != nil {
			inputs[k] = in
		}
		if err != nil {
			return err
		}
		if k.records == h.cfg.Records && !k.byEvent {
			rep.InputRate = rate
		}
	}
	for run := 1; run <= h.cfg.Runs; run++ {
		for _, ct := range h.cfg.selected() {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			in := inputs[inputKey{h.cfg.recordsFor(ct), ct.KeyByEvent}]
			r := h.throughputRun(ctx, ct, run, in.topic, in.ends, in.plan)
			if r.Err != "" {
				rep.Errors = append(rep.Errors, fmt.Sprintf("%s run %d: %s", ct.Name, run, r.Err))
			}
			txn := ""
			if r.Commits > 0 && r.Seconds > 0 {
				txn = fmt.Sprintf("  %d txns, %.0f%% in commit", r.Commits, 100*r.CommitSeconds/r.Seconds)
			}
			if in := r.Inbox; in.Events > 0 {
				txn += "  " + inboxTimesText(in)
			}
			h.cfg.logf("%-20s run %d: %8.0f events/s  %6.1fs  cpu %.1fs  rss %s  outputs %d dup %d missing %d%s %s",
				ct.Name, run, r.Throughput, r.Seconds, r.CPU, mib(r.PeakRSS), r.Correct.Outputs, r.Correct.Duplicates, r.Correct.Missing, txn, r.Err)
			rep.Runs = append(rep.Runs, r)
		}
	}
	return nil
}

// contenderArgs are the flags of a contender process.
func (h *harness) contenderArgs(ct Contender, input, output, group, stateDir string) []string {
	args := []string{"-kind", string(ct.Kind), "-brokers", strings.Join(h.cfg.Brokers, ","),
		"-input", input, "-output", output, "-group", group, "-commit-interval", ct.CommitInterval.String()}
	if stateDir != "" {
		args = append(args, "-state-dir", stateDir)
	}
	if ct.Threads > 0 {
		args = append(args, "-threads", strconv.Itoa(ct.Threads))
	}
	if ct.Rekey != "" {
		args = append(args, "-rekey", ct.Rekey)
	}
	if ct.Changelog {
		args = append(args, "-changelog", group+"-table")
	}
	if h.redis != nil {
		args = append(args, "-redis", h.redis.Addr, "-redis-ttl", "1h")
	}
	if h.postgres != nil {
		args = append(args, "-postgres", h.postgres.DSN)
	}
	return args
}

// prepare gives a contender a fresh output topic, group, state dir and
// empty Redis/PostgreSQL state; cleanup removes them afterwards.
func (h *harness) prepare(ctx context.Context, ct Contender, tag string) (group, output, stateDir string, cleanup func(), err error) {
	group = h.name(ct.Name, tag)
	output = group + "-out"
	stateDir = filepath.Join(h.cfg.WorkDir, "state", group)
	cleanup = func() {
		h.admin.deleteTopics(output, group+"-table", group+"-loop", group+"-dlq",
			group+"-"+kstreamsStore+"-changelog", group+"-"+kstreamsRepartition+"-repartition")
		os.RemoveAll(stateDir)
	}
	// The worker creates its topics itself when missing; creating them here
	// (as a deployment would have them) keeps a just-created topic without a
	// leader out of the measurement.
	topics := []topicSpec{{output, nil}}
	if ct.Kind == contenders.Exactly || ct.Kind == contenders.AtLeast || ct.Kind == contenders.PostgresInbox {
		topics = append(topics, topicSpec{group + "-table", tableTopicConfig}, topicSpec{group + "-loop", nil},
			topicSpec{group + "-dlq", nil})
	}
	if ct.Changelog {
		topics = append(topics, topicSpec{group + "-table", tableTopicConfig})
	}
	for _, t := range topics {
		if err = h.admin.createTopic(t.name, h.cfg.Partitions, t.cfg); err != nil {
			return
		}
	}
	if h.redis != nil {
		err = h.redis.Flush(ctx)
	}
	if err == nil && h.postgres != nil {
		err = contenders.Reset(ctx, h.postgres.DSN)
	}
	return
}

func (h *harness) throughputRun(ctx context.Context, ct Contender, run int, input string, ends map[int32]int64, plan *loadgen.Plan) RunResult {
	return h.throughputRunWith(ctx, ct, run, input, ends, plan, nil)
}

func (h *harness) throughputRunWith(ctx context.Context, ct Contender, run int, input string, ends map[int32]int64, plan *loadgen.Plan, extra []string) (r RunResult) {
	r = RunResult{Contender: ct.Name, Run: run, Records: plan.Len()}
	group, output, stateDir, cleanup, err := h.prepare(ctx, ct, fmt.Sprintf("r%d", run))
	defer cleanup()
	if err != nil {
		r.Err = err.Error()
		return r
	}
	w, err := watch.Start(watch.Config{Brokers: h.cfg.Brokers, Output: output, Plan: plan, ByRecord: ct.ByRecord})
	if err != nil {
		r.Err = err.Error()
		return r
	}
	defer w.Stop()
	var cg *memCgroup
	if limit := h.cfg.WorkerMemoryLimit; limit > 0 && ct.Kind == contenders.Exactly {
		if cg, err = newMemCgroup(group, limit); err != nil {
			r.Err = err.Error()
			return r
		}
		defer func() { // after c.stop: the process has exited
			if _, err := cg.close(h.cfg.logf); err != nil {
				r.Err = strings.TrimPrefix(r.Err+"; "+err.Error(), "; ")
			}
		}()
	}
	c, err := h.startChild(ct.Name, append(h.contenderArgs(ct, input, output, group, stateDir), extra...),
		filepath.Join(h.cfg.WorkDir, group+".log"), cg)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	defer c.stop()
	if err := c.waitReady(3 * time.Minute); err != nil {
		r.Err = err.Error()
		return r
	}
	t0, cpu0 := time.Now(), h.readCPU(c)
	var (
		warmAt  time.Time
		warmCPU cpuReadings
	)
	end, err := h.waitDone(ctx, c, w, group, input, ends, t0, func(p watch.Progress) {
		warmAt, warmCPU = time.Now(), h.readCPU(c)
		r.WarmRecords = float64(plan.Len()) * (1 - float64(p.Distinct)/float64(p.Expected))
	})
	cpu1 := h.readCPU(c)
	if mem, merr := procstat.ReadMemory(c.pid()); merr == nil {
		r.PeakRSS = mem.PeakRSS
	}
	if err != nil {
		r.Err = err.Error()
	}
	if stopErr := c.stop(); stopErr != nil && r.Err == "" {
		r.Err = stopErr.Error()
	}
	r.Commits, r.CommitSeconds, r.CommitRecords = c.commits, c.commitSeconds, c.commitRecords
	r.Inbox = c.inbox
	w.Stop()
	r.Correct = w.Correctness()
	if msg := h.checkDatabase(ctx, ct, group, plan.Distinct(), &r.Correct); msg != "" {
		r.Err = strings.TrimPrefix(r.Err+"; "+msg, "; ")
	}
	r.Seconds = end.Sub(t0).Seconds()
	if r.Seconds > 0 {
		r.Throughput = float64(plan.Len()) / r.Seconds
	}
	if !warmAt.IsZero() && end.After(warmAt) && r.WarmRecords > 0 {
		r.WarmSeconds = end.Sub(warmAt).Seconds()
		r.WarmThroughput = r.WarmRecords / r.WarmSeconds
		r.WarmCPU = cpu1.child.Sub(warmCPU.child).Total()
	}
	r.CPU = cpu1.child.Sub(cpu0.child).Total()
	r.BrokerCPU = cpu1.broker.Sub(cpu0.broker).Total()
	r.RedisCPU = cpu1.redis.Sub(cpu0.redis).Total()
	r.PostgresCPU = cpu1.postgres.Sub(cpu0.postgres).Total()
	return r
}

// checkDatabase is the postgres-inbox contender's exactness check in the
// database, after its process stopped: order_totals must have counted every
// distinct event once and the inbox must hold one row per distinct event.
// Events either counts short of distinct are added to c's missing, events
// beyond it to its duplicates (the larger of the watcher's and the
// database's figure is kept, as both count the same events); a mismatch is
// also returned as a message, "" when all is well or for other contenders.
func (h *harness) checkDatabase(ctx context.Context, ct Contender, group string, distinct int, c *watch.Correctness) string {
	if ct.Kind != contenders.PostgresInbox || h.postgres == nil {
		return ""
	}
	got, err := contenders.CheckInbox(ctx, h.postgres.DSN, group)
	if err != nil {
		return "database check: " + err.Error()
	}
	var missing, dups int
	for _, n := range []int64{got.OrderEvents, got.InboxRows} {
		missing = max(missing, distinct-int(n))
		dups = max(dups, int(n)-distinct)
	}
	if missing == 0 && dups == 0 {
		return ""
	}
	c.Missing, c.Duplicates = max(c.Missing, missing), max(c.Duplicates, dups)
	return fmt.Sprintf("database: order_totals counted %d events and the inbox holds %d rows, for %d distinct events",
		got.OrderEvents, got.InboxRows, distinct)
}

// inboxTimesText is where the inbox contender's database time went, per
// event and per commit (over the process's life, all members together).
func inboxTimesText(in contenders.InboxStats) string {
	perEvent := func(sec float64) float64 { return 1e6 * sec / float64(max(in.Events, 1)) }
	return fmt.Sprintf("database: %.0f µs/event in the inbox handler (upsert %.0f, savepoint + claim + waits for a commit %.0f), %d commits of %.1f ms (%.0f µs/event)",
		perEvent(in.HandleSeconds), perEvent(in.UpsertSeconds), perEvent(in.HandleSeconds-in.UpsertSeconds),
		in.Commits, 1e3*in.CommitSeconds/float64(max(in.Commits, 1)), perEvent(in.CommitSeconds))
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

type logWriter func(string)

func (l logWriter) Write(p []byte) (int, error) { l(string(p)); return len(p), nil }
