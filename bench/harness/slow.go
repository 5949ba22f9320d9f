package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/bench/contenders"
	"github.com/dedupkit/dedup/bench/loadgen"
	"github.com/dedupkit/dedup/bench/procstat"
	"github.com/dedupkit/dedup/bench/watch"
	"github.com/dedupkit/dedup/internal/kafkautil"
)

// SlowCase is one handler of the slow-handler benchmark: how long it sleeps
// and the backlog (input records, duplicates included) waiting for it.
type SlowCase struct {
	Sleep   time.Duration
	Records int
}

// ParseSlowCases reads "100ms:1000000,3s:20000" (sleep:records, comma-separated).
func ParseSlowCases(s string) ([]SlowCase, error) {
	var out []SlowCase
	for _, part := range strings.Split(s, ",") {
		sleep, n, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return nil, fmt.Errorf("slow case %q: want sleep:records, as 100ms:1000000", part)
		}
		d, err := time.ParseDuration(sleep)
		if err != nil {
			return nil, fmt.Errorf("slow case %q: %w", part, err)
		}
		records, err := strconv.Atoi(n)
		if err != nil {
			return nil, fmt.Errorf("slow case %q: %w", part, err)
		}
		out = append(out, SlowCase{Sleep: d, Records: records})
	}
	return out, nil
}

// SlowContender is one row of the slow-handler benchmark.
type SlowContender struct {
	Name  string
	Label string
	Kind  contenders.Kind
	// Concurrency: the worker's dedup.Concurrency or the Parallel
	// Consumer's maxConcurrency; Threads: Kafka Streams' num.stream.threads
	// (0: its default, 1).
	Concurrency int
	Threads     int
	// ByRecord: no dedup state (the Parallel Consumer), outputs are counted
	// per input record.
	ByRecord bool
	// NotInSmoke leaves the row out of the slow smoke.
	NotInSmoke bool
}

// inFlight is how many handler calls the contender runs at once at most
// (on partitions partitions): its rate is bound by inFlight / sleep.
func (c SlowContender) inFlight(partitions int32) int {
	switch c.Kind {
	case contenders.KStreams:
		return min(max(1, c.Threads), int(partitions))
	default:
		return max(1, c.Concurrency)
	}
}

// ParallelConsumerVersion is the Parallel Consumer of bench/kstreams/pom.xml.
const ParallelConsumerVersion = "0.5.3.3"

// SlowContenders is the slow-handler benchmark's line-up, in report order.
func SlowContenders() []SlowContender {
	ks := "Kafka Streams " + contenders.KStreamsVersion + ", exactly_once_v2, "
	return []SlowContender{
		{Name: "eos-c1", Label: "this worker, exactly-once, one at a time (Concurrency 1)", Kind: contenders.Exactly, Concurrency: 1},
		{Name: "kstreams", Label: ks + "1 stream thread (its default)", Kind: contenders.KStreams},
		// The same application as kstreams with another number: left out
		// of the smoke, where a JVM start costs more than the run.
		{Name: "kstreams-12t", Label: ks + "12 stream threads", Kind: contenders.KStreams, Threads: 12, NotInSmoke: true},
		{Name: "parallel-c1000", Label: "Confluent Parallel Consumer " + ParallelConsumerVersion +
			", transactional, UNORDERED, maxConcurrency 1000 (no dedup state)", Kind: contenders.Parallel, Concurrency: 1000, ByRecord: true},
		// Between the two others; left out of the smoke like kstreams-12t.
		{Name: "eos-c100", Label: "this worker, exactly-once, Concurrency 100", Kind: contenders.Exactly, Concurrency: 100, NotInSmoke: true},
		{Name: "eos-c1000", Label: "this worker, exactly-once, Concurrency 1000", Kind: contenders.Exactly, Concurrency: 1000},
	}
}

// SlowSmokeContenders names the rows of the slow smoke: all but those
// marked NotInSmoke.
func SlowSmokeContenders() []string {
	var out []string
	for _, ct := range SlowContenders() {
		if !ct.NotInSmoke {
			out = append(out, ct.Name)
		}
	}
	return out
}

// SlowConfig is one run of the slow-handler benchmark.
type SlowConfig struct {
	Brokers      []string
	Cases        []SlowCase
	Contenders   []string // by name (default: all of SlowContenders())
	Partitions   int32
	DupRate      float64
	PayloadBytes int
	// Warmup: from READY, how long before the window starts; Window: how
	// long the rate is measured, unless the input is done first.
	Warmup, Window time.Duration
	// CommitInterval of every contender (default 100 ms).
	CommitInterval time.Duration

	Exe       string
	ExeArgs   []string
	ExeEnv    []string
	WorkDir   string
	Doc       string // markdown report path; "" writes none
	KafkaData string
	Command   string
	Log       io.Writer
}

func (c *SlowConfig) setDefaults() {
	if c.Partitions == 0 {
		c.Partitions = 12
	}
	if c.PayloadBytes == 0 {
		c.PayloadBytes = 200
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = 100 * time.Millisecond
	}
	if len(c.Contenders) == 0 {
		for _, ct := range SlowContenders() {
			c.Contenders = append(c.Contenders, ct.Name)
		}
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// Validate reports a config that cannot run (after defaults).
func (c *SlowConfig) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("no brokers"))
	}
	if len(c.Cases) == 0 {
		errs = append(errs, errors.New("no cases"))
	}
	for _, sc := range c.Cases {
		if sc.Sleep <= 0 || sc.Records <= 0 {
			errs = append(errs, fmt.Errorf("case %v: sleep and records must be positive", sc))
		}
	}
	if c.Partitions <= 0 || c.Window <= 0 || c.Warmup < 0 {
		errs = append(errs, errors.New("partitions and window must be positive, warm-up not negative"))
	}
	if c.DupRate < 0 || c.DupRate > 0.5 {
		errs = append(errs, fmt.Errorf("duplicate rate %v: want 0..0.5", c.DupRate))
	}
	if c.Exe == "" || c.WorkDir == "" {
		errs = append(errs, errors.New("exe and work dir are required"))
	}
	var names []string
	for _, ct := range SlowContenders() {
		names = append(names, ct.Name)
	}
	for _, n := range c.Contenders {
		if !slices.Contains(names, n) {
			errs = append(errs, fmt.Errorf("contender %q: want one of %v", n, names))
		}
	}
	return errors.Join(errs...)
}

func (c *SlowConfig) selected() []SlowContender {
	var out []SlowContender
	for _, ct := range SlowContenders() {
		if slices.Contains(c.Contenders, ct.Name) {
			out = append(out, ct)
		}
	}
	return out
}

func (c *SlowConfig) logf(format string, args ...any) {
	fmt.Fprintf(c.Log, "%s bench slow: "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// SlowResult is one row of one case.
type SlowResult struct {
	Contender string
	Sleep     time.Duration
	Records   int // the backlog
	// Events handled (distinct outputs; records for ByRecord) in the
	// measured window, its seconds and their rate. Done: the input was
	// done before the window ended (the window then ends there).
	Events     int
	Seconds    float64
	Throughput float64
	Done       bool
	// CPU seconds of the contender process and of the broker over the
	// window; PeakRSS of the contender process.
	CPU, BrokerCPU float64
	PeakRSS        int64
	// Committed: input records below the group's committed offsets after
	// the stop; Correct counts the outputs against them (CorrectnessOf).
	Committed int
	Correct   watch.Correctness
	Err       string
}

// Clean reports an exactly-once output (as far as committed) and no error.
func (r *SlowResult) Clean() bool {
	c := r.Correct
	return r.Err == "" && r.Events > 0 && c.Missing == 0 && c.Duplicates == 0 && c.Foreign == 0
}

// SlowReport is everything one slow-handler run measured.
type SlowReport struct {
	Config   SlowConfig
	Commit   string
	Started  time.Time
	Finished time.Time
	Machine  Machine
	Results  []SlowResult
	Versions map[string]string
}

// Clean reports that every row ran and was exactly-once.
func (r *SlowReport) Clean() bool {
	for i := range r.Results {
		if !r.Results[i].Clean() {
			return false
		}
	}
	return len(r.Results) > 0
}

// RunSlow runs every selected contender on every case. It returns the report
// also when a row failed (its Err says why).
func RunSlow(ctx context.Context, cfg SlowConfig) (*SlowReport, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("slow: %w", err)
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return nil, err
	}
	b := make([]byte, 3)
	rand.Read(b)
	h := &harness{cfg: Config{Brokers: cfg.Brokers, Partitions: cfg.Partitions, DupRate: cfg.DupRate,
		PayloadBytes: cfg.PayloadBytes, Exe: cfg.Exe, ExeArgs: cfg.ExeArgs, ExeEnv: cfg.ExeEnv,
		WorkDir: cfg.WorkDir, Log: cfg.Log}, runID: hex.EncodeToString(b), brokerPID: brokerPID(cfg.KafkaData)}
	rep := &SlowReport{Config: cfg, Commit: gitCommit(), Started: time.Now(), Machine: describeMachine(cfg.KafkaData),
		Versions: map[string]string{}}
	defer func() { rep.Finished = time.Now() }() // also when it ends early
	var err error
	if h.admin, err = newAdmin(cfg.Brokers); err != nil {
		return nil, err
	}
	defer h.admin.Close()
	for _, ct := range cfg.selected() {
		if ct.Kind == contenders.KStreams || ct.Kind == contenders.Parallel {
			// One jar holds both; built before anything is measured.
			if _, err := contenders.BuildKStreams(ctx, logWriter(func(s string) { cfg.logf("%s", strings.TrimSpace(s)) })); err != nil {
				return nil, fmt.Errorf("slow: %w", err)
			}
			rep.Versions["java"] = fmt.Sprintf("%s, JVM flags %s", javaVersion(ctx), strings.Join(contenders.KStreamsJVMFlags, " "))
			break
		}
	}
	for i, sc := range cfg.Cases {
		in, _, err := h.writeInput(ctx, sc.Records, fmt.Sprintf("s%d", i), false)
		if err != nil {
			if in != nil {
				h.admin.deleteTopics(in.topic)
			}
			return rep, err
		}
		for _, ct := range cfg.selected() {
			if ctx.Err() != nil {
				h.admin.deleteTopics(in.topic)
				return rep, ctx.Err()
			}
			r := h.slowRun(ctx, &cfg, sc, ct, in)
			cfg.logf("%-14s sleep %v: %8.1f events/s over %.1fs (%d events%s)  cpu %.1fs  rss %s  committed %d: outputs %d missing %d dup %d %s",
				ct.Name, sc.Sleep, r.Throughput, r.Seconds, r.Events, map[bool]string{true: ", input done"}[r.Done], r.CPU,
				mib(r.PeakRSS), r.Committed, r.Correct.Outputs, r.Correct.Missing, r.Correct.Duplicates, r.Err)
			rep.Results = append(rep.Results, r)
		}
		h.admin.deleteTopics(in.topic)
	}
	return rep, nil
}

// slowRun is one row: the contender starts on the backlog, and from the end
// of the warm-up the window measures the events it hands to the output.
func (h *harness) slowRun(ctx context.Context, cfg *SlowConfig, sc SlowCase, sct SlowContender, in *input) (r SlowResult) {
	r = SlowResult{Contender: sct.Name, Sleep: sc.Sleep, Records: sc.Records}
	// Both read the input keyed by aggregate with every copy of an event in
	// its partition: the worker with --rekey=never, Kafka Streams in its
	// local mode; so the group's committed input offsets say what was done.
	ct := Contender{Name: sct.Name, Kind: sct.Kind, CommitInterval: cfg.CommitInterval, Rekey: "never",
		Threads: sct.Threads, ByRecord: sct.ByRecord}
	group, output, stateDir, cleanup, err := h.prepare(ctx, ct, "slow")
	defer cleanup()
	if err != nil {
		r.Err = err.Error()
		return r
	}
	w, err := watch.Start(watch.Config{Brokers: cfg.Brokers, Output: output, Plan: in.plan, ByRecord: ct.ByRecord})
	if err != nil {
		r.Err = err.Error()
		return r
	}
	defer w.Stop()
	args := append(h.contenderArgs(ct, in.topic, output, group, stateDir), "-sleep", sc.Sleep.String())
	if sct.Concurrency > 0 {
		args = append(args, "-concurrency", strconv.Itoa(sct.Concurrency))
	}
	c, err := h.startChild(sct.Name, args, filepath.Join(cfg.WorkDir, group+".log"), nil)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	defer c.stop()
	if err := c.waitReady(3 * time.Minute); err != nil {
		r.Err = err.Error()
		return r
	}
	ready := time.Now()
	done := func() bool { p := w.Progress(); return p.Distinct >= p.Expected }
	// await polls until cond, the deadline, a failure or the input's end.
	await := func(deadline time.Time) error {
		for time.Now().Before(deadline) && !done() {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := c.exited(); err != nil {
				return err
			}
			time.Sleep(100 * time.Millisecond)
		}
		return nil
	}
	if err := await(ready.Add(cfg.Warmup)); err != nil {
		r.Err = err.Error()
		return r
	}
	t1, p1, cpu1 := time.Now(), w.Progress(), h.readCPU(c)
	if p1.Distinct >= p1.Expected {
		// Done within the warm-up (a small input): the window is the run.
		t1, p1.Distinct = ready, 0
	}
	if err := await(t1.Add(cfg.Window)); err != nil {
		r.Err = err.Error()
		return r
	}
	t2, p2, cpu2 := time.Now(), w.Progress(), h.readCPU(c)
	if r.Done = p2.Distinct >= p2.Expected; r.Done {
		t2 = p2.LastNew
	}
	if mem, err := procstat.ReadMemory(c.pid()); err == nil {
		r.PeakRSS = mem.PeakRSS
	}
	r.Events, r.Seconds = p2.Distinct-p1.Distinct, t2.Sub(t1).Seconds()
	if r.Seconds > 0 {
		r.Throughput = float64(r.Events) / r.Seconds
	}
	r.CPU = cpu2.child.Sub(cpu1.child).Total()
	r.BrokerCPU = cpu2.broker.Sub(cpu1.broker).Total()
	if err := c.stop(); err != nil {
		r.Err = err.Error()
	}
	settle(w, 30*time.Second)
	w.Stop()
	recs, err := h.committedRecords(group, in)
	if err != nil {
		r.Err = strings.TrimPrefix(r.Err+"; "+err.Error(), "; ")
	}
	r.Committed = len(recs)
	r.Correct = w.CorrectnessOf(recs)
	return r
}

// settle waits until the watcher has read no new output for two seconds
// (at most max): the stopped contender's last transaction is then read.
func settle(w *watch.Watcher, max time.Duration) {
	deadline := time.Now().Add(max)
	last, since := w.Progress().Outputs, time.Now()
	for time.Now().Before(deadline) && time.Since(since) < 2*time.Second {
		time.Sleep(200 * time.Millisecond)
		if n := w.Progress().Outputs; n != last {
			last, since = n, time.Now()
		}
	}
}

// committedRecords reads the input below the group's committed offsets and
// returns the plan index (the bench-rec header) of every record there.
func (h *harness) committedRecords(group string, in *input) ([]int, error) {
	parts := make([]int32, 0, len(in.ends))
	for p := range in.ends {
		parts = append(parts, p)
	}
	resp, err := h.admin.ca.ListConsumerGroupOffsets(group, map[string][]int32{in.topic: parts})
	if err != nil {
		return nil, fmt.Errorf("committed offsets of %s: %w", group, err)
	}
	sc := sarama.NewConfig()
	sc.Version = kafkautil.SaramaVersion
	sc.ClientID = "bench-slow-committed"
	consumer, err := sarama.NewConsumer(h.cfg.Brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("committed records: %w", err)
	}
	defer consumer.Close()
	var recs []int
	for _, p := range parts {
		b := resp.GetBlock(in.topic, p)
		if b == nil || b.Offset <= 0 {
			continue
		}
		pc, err := consumer.ConsumePartition(in.topic, p, sarama.OffsetOldest)
		if err != nil {
			return nil, fmt.Errorf("committed records: %s/%d: %w", in.topic, p, err)
		}
		timeout := time.After(time.Minute)
	read:
		for {
			select {
			case m := <-pc.Messages():
				if m.Offset >= b.Offset {
					break read
				}
				for _, hd := range m.Headers {
					if string(hd.Key) == loadgen.HeaderRecord {
						recs = append(recs, loadgen.ParseRecordHeader(hd.Value))
					}
				}
				if m.Offset == b.Offset-1 {
					break read
				}
			case <-timeout:
				pc.Close()
				return nil, fmt.Errorf("committed records: %s/%d: not read up to %d in a minute", in.topic, p, b.Offset)
			}
		}
		pc.Close()
	}
	return recs, nil
}
