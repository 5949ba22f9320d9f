package main

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/internal/netfault"
)

// scenario is one guarantee's run: its topics, group and directory.
type scenario struct {
	cfg     *Config
	mode    string
	cluster *cluster
	bin     string
	dir     string // <run dir>/<mode>
	input   string
	output  string
	group   string
	out     io.Writer // the console
	logFile *os.File  // <dir>/timeline.log
	start   time.Time
	mu      sync.Mutex // serializes log lines
}

func (s *scenario) dlq() string  { return s.group + "-dlq" }
func (s *scenario) loop() string { return s.group + "-loop" }

// logf writes a timeline line, stamped with the time since the load began,
// to the console and to timeline.log.
func (s *scenario) logf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	line := fmt.Sprintf("[%s +%6.1fs] %s\n", s.mode, time.Since(s.start).Seconds(), fmt.Sprintf(format, args...))
	io.WriteString(s.out, line)
	if s.logFile != nil {
		io.WriteString(s.logFile, line)
	}
}

// runScenario produces the load while the plan's faults hit the workers and
// the brokers, waits until the workers caught up, stops them and verifies.
func runScenario(ctx context.Context, cfg *Config, cl *cluster, px *netfault.Proxy, bin, runDir, mode string, seed uint64, out io.Writer) (*result, error) {
	id := make([]byte, 3)
	crand.Read(id)
	suffix := mode + "-" + hex.EncodeToString(id)
	s := &scenario{cfg: cfg, mode: mode, cluster: cl, bin: bin, dir: filepath.Join(runDir, mode),
		input: "chaos-in-" + suffix, output: "chaos-out-" + suffix, group: "chaos-" + suffix, out: out, start: time.Now()}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, err
	}
	var err error
	if s.logFile, err = os.Create(filepath.Join(s.dir, "timeline.log")); err != nil {
		return nil, err
	}
	defer s.logFile.Close()

	res := &result{mode: mode, input: s.input, output: s.output, dlq: s.dlq(), group: s.group, dir: s.dir}
	if err := cl.createInput(s.input, cfg.Partitions); err != nil {
		return nil, err
	}
	args := []string{"--brokers", strings.Join(cl.brokers, ","), "--group", s.group, "--input", s.input,
		"--output", s.output, "--guarantee", mode}
	if mode == exactlyOnce { // goka's runtime keeps its 10 s (the worker refuses another)
		args = append(args, "--session-timeout", cfg.SessionTimeout.String(),
			"--standby-replicas", fmt.Sprint(cfg.StandbyReplicas))
		// Liveness connections, as a deployment with a peer secret runs
		// them; any free port, since the instances share a host.
		secret := make([]byte, 48)
		crand.Read(secret)
		secretFile := filepath.Join(s.dir, "peer-secret")
		if err := os.WriteFile(secretFile, []byte(hex.EncodeToString(secret)), 0o600); err != nil {
			return nil, err
		}
		args = append(args, "--peer-addr", "127.0.0.1:0", "--peer-secret-file", secretFile)
	}
	fl := newFleet(bin, s.dir, cfg.Instances, args, s.logf)
	s.logf("topics %s -> %s, dead letters %s, group %s; %d instances", s.input, s.output, s.dlq(), s.group, cfg.Instances)
	if px != nil {
		fl.proxied = []string{"--brokers", px.Addrs()} // the later --brokers wins
		s.logf("w1 reaches the brokers through the fault proxy at %s", px.Addrs())
	}
	window := cfg.window()
	rng := rand.New(rand.NewPCG(seed, 2))
	plan := planFaults(cfg, window, rng)
	ch := &chaos{cfg: cfg, fleet: fl, cluster: cl, proxy: px, group: s.group, mode: mode, rng: rng, log: s.logf}
	s.logf("producing %d records at %d/s (about %v) while %d faults are applied", cfg.records(), cfg.Rate, window.Round(time.Second), len(plan))

	// Three goroutines owned here: the supervisor, the producer, the faults.
	// They stop when ctx is cancelled; each is waited for below.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { fl.supervise(runCtx) })
	for slot := range cfg.Instances {
		if err := fl.start(slot); err != nil { // supervise retries it
			s.logf("NOTE %v", err)
		}
	}
	prog := &progress{}
	loadStart := time.Now()
	var (
		prod            *produced
		prodErr, chaErr error
		loadDone        = make(chan struct{})
		faultsDone      = make(chan struct{})
	)
	ch.loadDone = loadDone
	wg.Go(func() {
		defer close(loadDone)
		prod, prodErr = produce(runCtx, cfg, cl.brokers, s.input, seed, prog)
		s.logf("load produced: %d records acknowledged (err %v)", prod.records, prodErr)
	})
	wg.Go(func() {
		defer close(faultsDone)
		chaErr = ch.run(runCtx, loadStart, plan)
		s.logf("faults applied: %s (err %v)", &ch.counts, chaErr)
	})
	status := time.NewTicker(30 * time.Second)
	defer status.Stop()
	for loadDone != nil || faultsDone != nil {
		select {
		case <-loadDone:
			loadDone = nil
			if prodErr != nil {
				cancel()
			}
		case <-faultsDone:
			faultsDone = nil
			if chaErr != nil {
				cancel()
			}
		case <-status.C:
			s.logf("status: %d/%d records produced, instances running %v", prog.sent.Load(), cfg.records(), slotNames(fl.running()))
		}
	}
	res.produceSeconds = time.Since(loadStart).Seconds()
	res.produced, res.faults = prod, ch.counts
	if prodErr != nil || chaErr != nil {
		cancel()
		wg.Wait()
		fl.stopAll()
		return res, fmt.Errorf("load: %v; faults: %v", prodErr, chaErr)
	}

	// Catch up: the group has committed everything on the input, then on the
	// loop topic (events re-keyed by ID pass through it).
	s.logf("waiting for the group to catch up (at most %v)", cfg.DrainTimeout)
	drainCtx, drainCancel := context.WithTimeout(runCtx, cfg.DrainTimeout)
	drainErr := kafkatest.WaitCommitted(drainCtx, cl.brokers, s.group, s.input)
	if drainErr == nil {
		drainErr = kafkatest.WaitCommitted(drainCtx, cl.brokers, s.group, s.loop())
	}
	drainCancel()
	res.drainSeconds = time.Since(loadStart).Seconds() - res.produceSeconds
	cancel()
	wg.Wait()
	res.crashes = fl.crashList()
	res.incarnations = fl.incarnations()
	res.unclean = fl.stopAll()
	if drainErr != nil {
		res.notes = append(res.notes, fmt.Sprintf("the group did not catch up: %v", drainErr))
		s.logf("NOTE the group did not catch up: %v", drainErr)
	} else {
		s.logf("caught up %.0fs after the load; workers stopped", res.drainSeconds)
	}

	// A transaction left open by a killed instance whose state was wiped
	// holds the last stable offset back until it times out.
	settle, settleCancel := context.WithTimeout(ctx, 2*time.Minute)
	defer settleCancel()
	for _, topic := range []string{s.output, s.dlq()} {
		if err := kafkatest.WaitSettled(settle, cl.brokers, topic); err != nil {
			res.notes = append(res.notes, err.Error())
		}
	}
	if res.durability, err = cl.durability(s.input, s.output, s.group+"-table", s.dlq(), s.loop(), "__transaction_state", "__consumer_offsets"); err != nil {
		res.notes = append(res.notes, fmt.Sprintf("describe topics: %v", err))
	}
	s.logf("verifying (read_committed)")
	if err := res.check(ctx, cfg, cl.brokers); err != nil {
		return res, err
	}
	return res, nil
}

func slotNames(slots []int) string {
	names := make([]string, len(slots))
	for i, s := range slots {
		names[i] = fmt.Sprintf("w%d", s+1)
	}
	return "[" + strings.Join(names, " ") + "]"
}
