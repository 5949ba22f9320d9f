// Command payments is a service whose handler calls a slow payment
// provider: for each PaymentRequested event it charges the account and
// writes the result, exactly once, with many calls in flight and one at a
// time per account.
//
//	go run ./examples/payments                      # embedded broker, sample stream
//	go run ./examples/payments --brokers k1:9092 --state-dir /var/lib/payments
//
// See README.md for what a slow call costs and how the options bound it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/examples/internal/embedded"
	"github.com/dedupkit/dedup/examples/payments/charge"
	"github.com/dedupkit/dedup/processor"
)

// config is what the flags set.
type config struct {
	brokers     []string // empty: run on an embedded broker with a sample stream
	stateDir    string
	instanceID  string
	group       string
	input       string
	output      string
	latency     time.Duration // of the stand-in payment provider
	concurrency int
	log         *slog.Logger
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		cfg.log.Error("payments stopped", "err", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	cfg := config{}
	fs := flag.NewFlagSet("payments", flag.ContinueOnError)
	brokers := fs.String("brokers", "", "Kafka bootstrap servers, comma-separated; empty: embedded broker with a sample stream")
	fs.StringVar(&cfg.stateDir, "state-dir", "", "directory of the seen-ID stores, required with --brokers; keep it across restarts")
	fs.StringVar(&cfg.instanceID, "instance-id", "", "stable name of this instance (default: one kept in --state-dir)")
	fs.StringVar(&cfg.group, "group", "payments-service", "consumer group")
	fs.StringVar(&cfg.input, "input", "payment.requests", "input topic of PaymentRequested events, keyed by account")
	fs.StringVar(&cfg.output, "output", "payment.results", "output topic of results, keyed by account")
	fs.DurationVar(&cfg.latency, "provider-latency", 200*time.Millisecond, "how long the stand-in payment provider takes per charge")
	fs.IntVar(&cfg.concurrency, "concurrency", 100, "charges in flight at once per member; one at a time per account")
	verbose := fs.Bool("v", false, "in embedded mode, show the worker's logs")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if cfg.concurrency < 1 {
		return cfg, fmt.Errorf("--concurrency: %d: want 1 or more", cfg.concurrency)
	}
	if cfg.latency < 0 {
		return cfg, fmt.Errorf("--provider-latency: %v must not be negative", cfg.latency)
	}
	level := slog.LevelInfo
	if *brokers != "" {
		cfg.brokers = strings.Split(*brokers, ",")
		if cfg.stateDir == "" {
			return cfg, errors.New("--state-dir: required with --brokers: the seen event IDs live there, and a restart must find them")
		}
	} else if !*verbose {
		level = slog.LevelError
	}
	cfg.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	return cfg, nil
}

// topology is the whole service. An account's requests are charged in the
// order they were made: they are keyed by account, judged in the account's
// partition (RekeyNever: a re-sent request keeps its key) and run one at a
// time per account (OrderByRecordKey), while up to --concurrency charges of
// other accounts run beside them.
func topology(cfg config) (*dedup.Topology, error) {
	return dedup.Define(cfg.group,
		dedup.Input(cfg.input),
		dedup.EventID(dedup.JSONField("eventId")),
		dedup.Rekey(dedup.RekeyNever),
		dedup.Output(cfg.output),
		dedup.Concurrency(cfg.concurrency),
		dedup.OrderByRecordKey(),
		dedup.HandlerTimeout(30*time.Second),
		dedup.Handle(charge.Handler(charge.SlowProvider{Latency: cfg.latency})))
}

// run runs the worker until ctx ends; with no brokers it runs the demo.
func run(ctx context.Context, cfg config, out io.Writer) error {
	top, err := topology(cfg)
	if err != nil {
		return err
	}
	top.Logger = cfg.log
	if len(cfg.brokers) == 0 {
		return demo(ctx, cfg, top, out)
	}
	p, err := processor.New(ctx, processor.Config{Brokers: cfg.brokers, StateDir: cfg.stateDir,
		InstanceID: cfg.instanceID, Logger: cfg.log}, top)
	if err != nil {
		return err
	}
	cfg.log.Info("payments running", "group", cfg.group, "input", cfg.input, "output", cfg.output,
		"concurrency", cfg.concurrency, "provider_latency", cfg.latency)
	if err := p.Run(ctx); err != nil {
		return err
	}
	cfg.log.Info("payments stopped: what it charged is committed")
	return nil
}

// demo starts an embedded broker, writes the sample stream, runs the worker
// until it has committed all of it, and prints the results per account.
func demo(ctx context.Context, cfg config, top *dedup.Topology, out io.Writer) error {
	b, err := embedded.Start(cfg.input, 3)
	if err != nil {
		return err
	}
	defer b.Close()
	in, err := b.Produce(cfg.input, Sample(4, 5))
	if err != nil {
		return err
	}
	if cfg.stateDir, err = os.MkdirTemp("", "payments-*"); err != nil {
		return err
	}
	defer os.RemoveAll(cfg.stateDir)
	p, err := processor.New(ctx, processor.Config{Brokers: b.Addrs, StateDir: cfg.stateDir,
		InstanceID: cfg.instanceID, Replication: 1, Logger: cfg.log}, top)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	waitErr := b.WaitCommitted(ctx, top.Group, cfg.input)
	stop()
	if err := errors.Join(waitErr, <-done); err != nil {
		return err
	}
	recs, err := b.Read(ctx, cfg.output)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%d requests in (one re-sent), %d charged, in each account's order:\n", len(in), len(recs))
	return printOrder(out, recs)
}

// printOrder prints each account's charged seq numbers in the order their
// results were committed (the output topic's order within the account's
// partition).
func printOrder(out io.Writer, recs []embedded.Record) error {
	seqs := map[string][]string{}
	for _, r := range recs {
		var res charge.Result
		if err := json.Unmarshal(r.Value, &res); err != nil {
			return fmt.Errorf("result %s: %w", r.Value, err)
		}
		seqs[res.Account] = append(seqs[res.Account], strconv.Itoa(res.Seq))
	}
	for _, acct := range slices.Sorted(maps.Keys(seqs)) {
		fmt.Fprintf(out, "  %s: seq %s\n", acct, strings.Join(seqs[acct], " "))
	}
	return nil
}

// Sample is accounts x perAccount PaymentRequested events, each account's
// in seq order, keyed by account; the first event is re-sent at the end.
func Sample(accounts, perAccount int) []embedded.Record {
	var recs []embedded.Record
	for s := 1; s <= perAccount; s++ {
		for a := 1; a <= accounts; a++ {
			acct := fmt.Sprintf("acct-%d", a)
			recs = append(recs, embedded.Record{Key: acct, Value: fmt.Appendf(nil,
				`{"eventId":"pay-%d-%d","aggregateId":%q,"type":"PaymentRequested","payload":{"account":%q,"seq":%d,"amount":%d.50}}`,
				a, s, acct, acct, s, 10*s)})
		}
	}
	return append(recs, recs[0])
}
