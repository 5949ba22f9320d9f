// Command bench runs the benchmark harness (docs/benchmarks.md).
//
//	bench run   [flags]   the full benchmark; prints the table, writes docs/benchmarks.md
//	bench smoke [flags]   the same at toy size (about a minute); exits 1 unless every
//	                      contender delivered every event exactly once
//	bench failover [flags] the failover benchmark: the pause after a kill, a restart,
//	                      a scale out; prints the table, writes docs/benchmarks-failover.md
//	bench slow [flags]    the slow-handler benchmark: a sleeping handler on a backlog, each
//	                      row's rate over a fixed window; writes docs/benchmarks-slow.md
//	bench contender ...   one contender process (the harness starts these)
//
// `make bench` and `make bench-smoke` start a broker of their own and call it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dedupkit/dedup/bench/contenders"
	"github.com/dedupkit/dedup/bench/harness"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "contender":
		os.Exit(contenders.Main(os.Args[2:], os.Stdout, os.Stderr))
	case "run", "smoke":
		os.Exit(run(os.Args[1], os.Args[2:]))
	case "failover":
		os.Exit(failover(os.Args[2:]))
	case "slow":
		os.Exit(slow(os.Args[2:]))
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: bench run|smoke|failover|slow [flags]  (bench run -h for the flags)")
	os.Exit(2)
}

func run(mode string, args []string) int {
	smoke := mode == "smoke"
	cfg := harness.Config{Log: os.Stderr, InstallServices: true}
	fs := flag.NewFlagSet("bench "+mode, flag.ContinueOnError)
	brokers := fs.String("brokers", os.Getenv("KAFKA_BROKERS"), "bootstrap brokers (default $KAFKA_BROKERS)")
	contenderList := fs.String("contenders", "", "comma-separated subset of the contenders (default all; smoke: all but kstreams)")
	fs.IntVar(&cfg.Records, "n", pick(smoke, 6000, 1_000_000), "input records of the throughput runs (duplicates included)")
	fs.IntVar(&cfg.SlowRecords, "n-slow", pick(smoke, 0, 100_000), "input records for the Redis and PostgreSQL contenders (0: same as -n)")
	fs.IntVar(&cfg.Runs, "runs", pick(smoke, 1, 3), "throughput runs per contender (the median is reported)")
	var partitions int
	fs.IntVar(&partitions, "partitions", 12, "partitions of the input")
	fs.Float64Var(&cfg.DupRate, "dup-rate", 0.2, "share of duplicate records")
	fs.IntVar(&cfg.PayloadBytes, "payload", 200, "payload bytes per event")
	fs.IntVar(&cfg.Rate, "rate", pick(smoke, 500, 500), "offered load of the latency runs, records/s")
	fs.Float64Var(&cfg.LatencySeconds, "latency-seconds", float64(pick(smoke, 3, 20)), "length of each latency run")
	fs.DurationVar(&cfg.LatencyWarmup, "latency-warmup", time.Duration(pick(smoke, 500, 2000))*time.Millisecond, "pause between READY and the latency run's first record")
	fs.IntVar(&cfg.RestoreRecords, "restore", pick(smoke, 20000, 1_000_000), "seen IDs in the restored partition (0 skips)")
	fs.IntVar(&cfg.HoldRecords, "hold", pick(smoke, 0, 10_000_000), "seen IDs held for the RSS/disk figure (0 skips)")
	fs.Int64Var(&cfg.HoldMemoryLimit, "hold-memory-limit", 200_000_000, "hard memory limit (bytes) of the cgroup the hold's worker runs in: the 200 MB target, enforced by the kernel (0: none)")
	fs.Int64Var(&cfg.WorkerMemoryLimit, "worker-memory-limit", 0, "hard memory limit (bytes) of a cgroup for every exactly-once throughput run (0: none)")
	fs.BoolVar(&cfg.Profile, "profile", !smoke, "add a CPU-profiled exactly-once run")
	fs.BoolVar(&cfg.HotPath, "hotpath", !smoke, "run the go test -bench hot-path benchmarks")
	fs.StringVar(&cfg.WorkDir, "workdir", "", "state dirs, logs, services (default: a new temp dir, removed after)")
	fs.StringVar(&cfg.Doc, "doc", pickS(smoke, "", "docs/benchmarks.md"), "markdown report to write (empty: none)")
	fs.StringVar(&cfg.KafkaData, "kafka-data", os.Getenv("KAFKA_DATA"), "kafka.sh data dir of the broker (for its CPU, version, disk)")
	fs.IntVar(&cfg.RedisPort, "redis-port", pick(smoke, 0, 26379), "redis-server port (0: a free one)")
	fs.IntVar(&cfg.PostgresPort, "postgres-port", pick(smoke, 0, 25432), "PostgreSQL port (0: a free one)")
	fs.BoolVar(&cfg.InstallServices, "install", true, "apt-get install redis-server and postgresql when missing (root)")
	fs.DurationVar(&cfg.RunTimeout, "run-timeout", 30*time.Minute, "give up on one run after this")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *brokers == "" {
		fmt.Fprintln(os.Stderr, "bench: -brokers (or KAFKA_BROKERS) is required")
		return 2
	}
	cfg.Brokers = strings.Split(*brokers, ",")
	cfg.Partitions = int32(partitions)
	if smoke {
		cfg.Contenders = harness.SmokeContenders()
	}
	if *contenderList != "" {
		cfg.Contenders = strings.Split(*contenderList, ",")
	}
	var (
		cleanup func()
		err     error
	)
	cfg.Command, cfg.Exe, cfg.WorkDir, cleanup, err = prepare("bench "+mode, args, cfg.WorkDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer cleanup()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := harness.Run(ctx, cfg)
	if rep != nil {
		fmt.Println()
		rep.PrintTable(os.Stdout)
		if werr := rep.WriteDoc(); werr != nil {
			fmt.Fprintln(os.Stderr, "bench: writing the doc:", werr)
			return 1
		} else if cfg.Doc != "" {
			fmt.Println("wrote", cfg.Doc)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	if smoke {
		if !rep.Clean() {
			fmt.Fprintln(os.Stderr, "bench smoke: correctness is not clean (see above)")
			return 1
		}
		fmt.Println("bench smoke: every contender delivered every event exactly once (the speed figures mean nothing at this size)")
	}
	return 0
}

func pick(smoke bool, small, full int) int {
	if smoke {
		return small
	}
	return full
}

func pickS(smoke bool, small, full string) string {
	if smoke {
		return small
	}
	return full
}

// prepare works out what every mode's run needs from its command line: the
// command the report names (BENCH_COMMAND, set by the Makefile, wins), this
// executable for the contender processes, and the work dir, absolute, or a
// new temporary one that cleanup removes.
func prepare(name string, args []string, workDir string) (command, exe, dir string, cleanup func(), err error) {
	command = name + " " + strings.Join(args, " ")
	if c := os.Getenv("BENCH_COMMAND"); c != "" {
		command = c
	}
	if exe, err = os.Executable(); err != nil {
		return "", "", "", nil, err
	}
	if workDir != "" {
		dir, err = filepath.Abs(workDir)
		return command, exe, dir, func() {}, err
	}
	if dir, err = os.MkdirTemp("", "dedup-"+strings.ReplaceAll(name, " ", "-")+"-"); err != nil {
		return "", "", "", nil, err
	}
	return command, exe, dir, func() { os.RemoveAll(dir) }, nil
}
