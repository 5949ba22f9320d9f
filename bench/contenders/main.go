package contenders

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dedupkit/dedup/internal/memlimit"
	"github.com/dedupkit/dedup/processor"
)

// Lines a contender process writes to stdout for the harness.
const (
	LineReady    = "READY"    // partitions held (and restored): consuming
	LineRestored = "RESTORED" // RESTORED <records> <seconds>: restore totals (eos)
	// LineCommits is written at exit (eos): COMMITS <transactions> <seconds
	// the processing loop spent committing> <records produced in them>.
	LineCommits = "COMMITS"
	// LineInbox is written at exit (postgres-inbox): INBOX <events> <seconds
	// in the inbox's handler> <of them in the upsert> <database commits>
	// <seconds in them>, summed over the members (InboxStats).
	LineInbox = "INBOX"
)

// Main is the entry point of a contender process: `contender -kind K ...`.
// It runs until SIGTERM or SIGINT, then shuts down cleanly. It writes
// READY to stdout once consuming and logs to stderr.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("contender", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg         Config
		kind        string
		brokers     string
		cpuProfile  string
		logLevel    string
		standbyFile string
		memRatio    float64
	)
	fs.StringVar(&kind, "kind", "", "raw, txn, eos, alo, redis, postgres, postgres-inbox, kstreams or parallel")
	fs.StringVar(&brokers, "brokers", "", "comma-separated bootstrap brokers")
	fs.StringVar(&cfg.Input, "input", "", "input topic")
	fs.StringVar(&cfg.Output, "output", "", "output topic")
	fs.StringVar(&cfg.Group, "group", "", "consumer group")
	fs.StringVar(&cfg.StateDir, "state-dir", "", "worker state dir (eos, alo, postgres-inbox)")
	fs.DurationVar(&cfg.CommitInterval, "commit-interval", 100*time.Millisecond, "transaction / offset commit interval")
	fs.IntVar(&cfg.Threads, "threads", 0, "worker --threads (eos, postgres-inbox), num.stream.threads (kstreams)")
	fs.StringVar(&cfg.Rekey, "rekey", "", "worker --rekey policy (eos, postgres-inbox): always or never; kstreams: never is the local mode")
	fs.DurationVar(&cfg.SessionTimeout, "session-timeout", 0, "group session timeout (eos: 0 is 10s; kstreams: session.timeout.ms, 0 is 45s)")
	fs.IntVar(&cfg.StandbyReplicas, "standby-replicas", 0, "eos: --standby-replicas; kstreams: num.standby.replicas")
	fs.StringVar(&cfg.InstanceID, "group-instance-id", "", "static member identity: worker --instance-id (eos), group.instance.id (kstreams)")
	fs.DurationVar(&cfg.Sleep, "sleep", 0, "eos, kstreams, parallel: the handler sleeps this long before it forwards the event")
	fs.IntVar(&cfg.Concurrency, "concurrency", 0, "eos: dedup.Concurrency; parallel: maxConcurrency (0: the default)")
	fs.StringVar(&cfg.Changelog, "changelog", "", "txn: also write a changelog-sized record per input record to this compacted topic")
	fs.StringVar(&cfg.RedisAddr, "redis", "", "redis host:port")
	fs.DurationVar(&cfg.RedisTTL, "redis-ttl", time.Hour, "SET NX expiry")
	fs.StringVar(&cfg.PostgresDSN, "postgres", "", "PostgreSQL DSN")
	fs.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	fs.StringVar(&standbyFile, "standby-status-file", "", "eos with -standby-replicas: keep \"behind N\" (standbys not caught up) in this file")
	fs.StringVar(&logLevel, "log-level", "warn", "debug, info, warn, error")
	fs.Float64Var(&memRatio, "memory-limit-ratio", 0.9, "soft memory limit as a share of the cgroup's, as processor run --memory-limit-ratio")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		fmt.Fprintln(stderr, "contender: -log-level:", err)
		return 2
	}
	if Kind(kind) == KStreams || Kind(kind) == Parallel {
		// The JVM replaces this process: its pid is the one the harness reads.
		cfg.Kind, cfg.Brokers = Kind(kind), strings.Split(brokers, ",")
		err := execKStreams(cfg)
		fmt.Fprintln(stderr, "contender:", err)
		return 1
	}
	if dir := os.Getenv("BENCH_CPUPROFILE_DIR"); dir != "" && cpuProfile == "" {
		// Profiling every contender by hand: one file per process, as the
		// instances of a failover run share a group.
		cpuProfile = filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", cfg.Group, os.Getpid()))
	}
	// As `processor run` does before anything else (cmd/processor/run.go).
	limit, limitErr := memlimit.Apply(os.Getenv, memRatio)
	if limitErr != nil {
		fmt.Fprintln(stderr, "contender: -memory-limit-ratio:", limitErr)
		return 2
	}
	fmt.Fprintf(stderr, "contender: memory limit from %s: soft %d bytes, cgroup %d bytes\n", limit.Source, limit.Limit, limit.Cgroup)
	cfg.Kind = Kind(kind)
	cfg.Brokers = strings.Split(brokers, ",")
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	out := &lockedWriter{w: stdout}
	hooks := &restoreHooks{}
	cfg.Hooks = []processor.Hook{hooks}
	cfg.InboxStats = func(s InboxStats) {
		out.printf("%s %d %.6f %.6f %d %.6f\n", LineInbox, s.Events, s.HandleSeconds, s.UpsertSeconds, s.Commits, s.CommitSeconds)
	}
	if standbyFile != "" && cfg.Kind == Exactly && cfg.StandbyReplicas > 0 {
		st, err := newStandbyStatus(standbyFile)
		if err != nil {
			fmt.Fprintln(stderr, "contender: -standby-status-file:", err)
			return 2
		}
		hooks.standbys = st
	}

	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "contender:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "contender:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
	defer signal.Stop(sigs)
	leave := make(chan struct{})
	cfg.Leave = leave
	go func() { // ends on the first signal or when Main returns
		select {
		case sig := <-sigs:
			if dir := os.Getenv("BENCH_HEAPPROFILE_DIR"); dir != "" {
				writeHeapProfile(filepath.Join(dir, cfg.Group+".exit.heap.pprof"), stderr)
			}
			if sig == syscall.SIGUSR1 && cfg.Kind == Exactly {
				close(leave) // the worker asks to leave, then stops
				return
			}
			cancel()
		case <-ctx.Done():
		}
	}()
	err := Run(ctx, cfg, func() {
		if n, d := hooks.totals(); n > 0 {
			out.printf("%s %d %.6f\n", LineRestored, n, d.Seconds())
		}
		out.printf("%s\n", LineReady)
		if dir := os.Getenv("BENCH_HEAPPROFILE_DIR"); dir != "" {
			writeHeapProfile(filepath.Join(dir, cfg.Group+".heap.pprof"), stderr)
		}
	})
	if n, d, recs := hooks.commitTotals(); n > 0 {
		out.printf("%s %d %.6f %d\n", LineCommits, n, d.Seconds(), recs)
	}
	if err != nil && ctx.Err() == nil {
		fmt.Fprintln(stderr, "contender:", err)
		return 1
	}
	return 0
}

// writeHeapProfile writes the live heap (after a GC) and logs the Go
// runtime's memory figures: for finding where RSS goes, by hand.
func writeHeapProfile(path string, log io.Writer) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Fprintf(log, "heap: inuse %d MiB, idle %d MiB, released %d MiB, sys %d MiB\n",
		ms.HeapInuse>>20, ms.HeapIdle>>20, ms.HeapReleased>>20, ms.Sys>>20)
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(log, "heap profile:", err)
		return
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		fmt.Fprintln(log, "heap profile:", err)
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format, args...)
}

// restoreHooks times the exactly-once runtime's restore (from the first
// session's start, Rebalanced, before the stores are opened, to the last
// partition's final progress report) and adds up its transactions.
type restoreHooks struct {
	standbys *standbyStatus // nil: not asked for
	mu       sync.Mutex
	start    time.Time
	end      time.Time
	restored int64

	commits       int
	commitTime    time.Duration
	commitRecords int
}

func (h *restoreHooks) OnStandbyLag(p int32, records int64) {
	if h.standbys != nil {
		h.standbys.report(p, records)
	}
}

func (h *restoreHooks) OnTxnCommitted(took time.Duration, records int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.commits++
	h.commitTime += took
	h.commitRecords += records
}

func (h *restoreHooks) commitTotals() (int, time.Duration, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.commits, h.commitTime, h.commitRecords
}

func (h *restoreHooks) OnRebalanced() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.start.IsZero() {
		h.start = time.Now()
	}
}

func (h *restoreHooks) OnRestoreProgress(_ int32, restored, remaining int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.restored += restored
	if remaining == 0 && h.restored > 0 {
		h.end = time.Now()
	}
}

func (h *restoreHooks) totals() (int64, time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.end.IsZero() {
		return 0, 0
	}
	return h.restored, h.end.Sub(h.start)
}
