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

// slow runs `bench slow`: the slow-handler benchmark of
// docs/benchmarks-slow.md.
func slow(args []string) int {
	cfg := harness.SlowConfig{Log: os.Stderr}
	fs := flag.NewFlagSet("bench slow", flag.ContinueOnError)
	brokers := fs.String("brokers", os.Getenv("KAFKA_BROKERS"), "bootstrap brokers (default $KAFKA_BROKERS)")
	contenderList := fs.String("contenders", "", "comma-separated subset of the rows (default all)")
	cases := fs.String("cases", "100ms:1000000,3s:20000", "handlers as sleep:backlog records, comma-separated")
	fs.DurationVar(&cfg.Warmup, "warmup", 10*time.Second, "from READY to the start of the window")
	fs.DurationVar(&cfg.Window, "window", 40*time.Second, "how long each row's rate is measured (less when the input is done first)")
	var partitions int
	fs.IntVar(&partitions, "partitions", 12, "partitions of the input")
	fs.Float64Var(&cfg.DupRate, "dup-rate", 0.2, "share of duplicate records")
	fs.StringVar(&cfg.WorkDir, "workdir", "", "state dirs and logs (default: a new temp dir, removed after)")
	fs.StringVar(&cfg.Doc, "doc", "docs/benchmarks-slow.md", "markdown report to write (empty: none)")
	fs.StringVar(&cfg.KafkaData, "kafka-data", os.Getenv("KAFKA_DATA"), "kafka.sh data dir of the broker (for its CPU and version)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *brokers == "" {
		fmt.Fprintln(os.Stderr, "bench slow: -brokers (or KAFKA_BROKERS) is required")
		return 2
	}
	var err error
	if cfg.Cases, err = harness.ParseSlowCases(*cases); err != nil {
		fmt.Fprintln(os.Stderr, "bench slow: -cases:", err)
		return 2
	}
	cfg.Brokers = strings.Split(*brokers, ",")
	cfg.Partitions = int32(partitions)
	if *contenderList != "" {
		cfg.Contenders = strings.Split(*contenderList, ",")
	}
	var cleanup func()
	cfg.Command, cfg.Exe, cfg.WorkDir, cleanup, err = prepare("bench slow", args, cfg.WorkDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench slow:", err)
		return 1
	}
	defer cleanup()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := harness.RunSlow(ctx, cfg)
	if rep != nil {
		fmt.Println()
		rep.PrintTable(os.Stdout)
		if werr := rep.WriteDoc(); werr != nil {
			fmt.Fprintln(os.Stderr, "bench slow: writing the doc:", werr)
			return 1
		} else if cfg.Doc != "" {
			fmt.Println("wrote", cfg.Doc)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench slow:", err)
		return 1
	}
	if !rep.Clean() {
		fmt.Fprintln(os.Stderr, "bench slow: FAILED: a row failed, handled nothing or was not exactly-once (see above)")
		return 1
	}
	return 0
}
