package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dedupkit/dedup/bench/harness"
)

// failover runs `bench failover`: the failover benchmark of
// docs/benchmarks-failover.md.
func failover(args []string) int {
	cfg := harness.FailoverConfig{Log: os.Stderr}
	fs := flag.NewFlagSet("bench failover", flag.ContinueOnError)
	brokers := fs.String("brokers", os.Getenv("KAFKA_BROKERS"), "bootstrap brokers (default $KAFKA_BROKERS)")
	contenderList := fs.String("contenders", "eos", "comma-separated contenders: eos, kstreams")
	scenarioList := fs.String("scenarios", "", "comma-separated subset of kill, kill-restart, term-restart, scale-out, stop (default all)")
	quick := fs.Bool("quick", false, "a toy run in a few minutes: -ids 20000 -repeat 1 unless given")
	fs.IntVar(&cfg.IDs, "ids", 2_000_000, "seen IDs in the table before the measurement")
	fs.IntVar(&cfg.Repeat, "repeat", 5, "events per scenario (p50 and max are over these)")
	fs.IntVar(&cfg.Instances, "instances", 3, "instances in the group at rest")
	var partitions int
	fs.IntVar(&partitions, "partitions", 12, "partitions of the input")
	fs.IntVar(&cfg.Rate, "rate", 4000, "steady load, events/s")
	fs.Float64Var(&cfg.DupRate, "dup-rate", 0.2, "share of duplicate records in the load")
	fs.DurationVar(&cfg.SessionTimeout, "session-timeout", 10*time.Second, "group session timeout of every instance")
	fs.DurationVar(&cfg.CommitInterval, "commit-interval", 100*time.Millisecond, "commit interval of every instance")
	fs.DurationVar(&cfg.PollInterval, "poll", 100*time.Millisecond, "how often the group's offsets and assignment are read")
	fs.DurationVar(&cfg.EventTimeout, "event-timeout", 3*time.Minute, "give up on an event that has not settled after this")
	fs.StringVar(&cfg.ContenderLogLevel, "contender-log-level", "", "-log-level of every instance (debug, info, warn, error; default the contender's, warn)")
	fs.StringVar(&cfg.WorkDir, "workdir", "", "state dirs and logs (default: a new temp dir, removed after)")
	fs.StringVar(&cfg.Doc, "doc", "docs/benchmarks-failover.md", "markdown report to write (empty: none)")
	fs.StringVar(&cfg.KafkaData, "kafka-data", os.Getenv("KAFKA_DATA"), "kafka.sh data dir of the broker (for its version)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *quick {
		if !set["ids"] {
			cfg.IDs = 20_000
		}
		if !set["repeat"] {
			cfg.Repeat = 1
		}
	}
	if *brokers == "" {
		fmt.Fprintln(os.Stderr, "bench failover: -brokers (or KAFKA_BROKERS) is required")
		return 2
	}
	cfg.Brokers = strings.Split(*brokers, ",")
	cfg.Partitions = int32(partitions)
	cfg.Contenders = strings.Split(*contenderList, ",")
	if *scenarioList != "" {
		cfg.Scenarios = strings.Split(*scenarioList, ",")
	}
	var (
		cleanup func()
		err     error
	)
	cfg.Command, cfg.Exe, cfg.WorkDir, cleanup, err = prepare("bench failover", args, cfg.WorkDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench failover:", err)
		return 1
	}
	defer cleanup()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := harness.RunFailover(ctx, cfg)
	if rep != nil {
		fmt.Println()
		rep.PrintTable(os.Stdout)
		if werr := rep.WriteDoc(); werr != nil {
			fmt.Fprintln(os.Stderr, "bench failover: writing the doc:", werr)
			return 1
		} else if cfg.Doc != "" {
			fmt.Println("wrote", cfg.Doc)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench failover:", err)
		return 1
	}
	if !rep.Clean() {
		fmt.Fprintln(os.Stderr, "bench failover: FAILED: a scenario failed or its output was not exactly-once (see above)")
		return 1
	}
	return 0
}
