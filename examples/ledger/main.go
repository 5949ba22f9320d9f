// Command ledger is a service that debits accounts in PostgreSQL for payment
// events from Kafka and writes one settlement per debit, exactly once across
// both: however often an event is re-sent, the worker killed or a zombie
// instance resumed, each event changes its account once and yields one
// settlement.
//
//	LEDGER_POSTGRES_DSN=postgres://ledger@db/ledger \
//	  go run ./examples/ledger --brokers k1:9092 --state-dir /var/lib/ledger
//
// See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/dedupkit/dedup/examples/ledger/debit"
	"github.com/dedupkit/dedup/inbox"
	"github.com/dedupkit/dedup/processor"
)

// dsnEnv holds the database's connection string: kept out of the flags,
// which other users of the host can read.
const dsnEnv = "LEDGER_POSTGRES_DSN"

// config is what the flags and the environment set.
type config struct {
	brokers    []string
	stateDir   string // the seen-ID stores; keep it across restarts
	instanceID string // this instance's stable name; empty: one persisted in stateDir
	dsn        string
	group      string
	input      string
	output     string
	log        *slog.Logger
}

func main() {
	cfg, err := parseConfig(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		cfg.log.Error("ledger stopped", "err", err)
		os.Exit(1)
	}
}

func parseConfig(args []string, getenv func(string) string) (config, error) {
	cfg := config{log: slog.New(slog.NewTextHandler(os.Stderr, nil))}
	fs := flag.NewFlagSet("ledger", flag.ContinueOnError)
	brokers := fs.String("brokers", "", "Kafka bootstrap servers, comma-separated (required)")
	fs.StringVar(&cfg.stateDir, "state-dir", "", "directory of the seen-ID stores (required); keep it across restarts")
	fs.StringVar(&cfg.instanceID, "instance-id", "", "stable name of this instance, e.g. the pod name of a StatefulSet (default: one kept in --state-dir)")
	fs.StringVar(&cfg.group, "group", "ledger", "consumer group, also the inbox's")
	fs.StringVar(&cfg.input, "input", "payments", "input topic of payment events")
	fs.StringVar(&cfg.output, "output", "settlements", "output topic of settlements, keyed by account")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if *brokers == "" {
		return cfg, errors.New("--brokers: required")
	}
	cfg.brokers = strings.Split(*brokers, ",")
	if cfg.stateDir == "" {
		return cfg, errors.New("--state-dir: required: the seen event IDs live there, and a restart must find them")
	}
	if cfg.dsn = getenv(dsnEnv); cfg.dsn == "" {
		return cfg, fmt.Errorf("%s: required: the PostgreSQL connection string of the accounts and the inbox", dsnEnv)
	}
	return cfg, nil
}

// run runs the service until ctx ends.
func run(ctx context.Context, cfg config) error {
	db, ib, err := debit.Open(ctx, cfg.dsn, inbox.Config{Group: cfg.group, Logger: cfg.log})
	if err != nil {
		return err
	}
	defer db.Close()
	top, err := debit.Topology(cfg.group, cfg.input, cfg.output, debit.Handler(ib, cfg.output))
	if err != nil {
		return err
	}
	top.Logger = cfg.log
	p, err := processor.New(ctx, processor.Config{Brokers: cfg.brokers, StateDir: cfg.stateDir,
		InstanceID: cfg.instanceID, Logger: cfg.log}, top)
	if err != nil {
		return err
	}
	// The sweeper deletes inbox rows past the retention; it stops with
	// the worker.
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { ib.RunSweeper(runCtx) })
	cfg.log.Info("ledger running", "group", cfg.group, "input", cfg.input, "output", cfg.output)
	err = p.Run(runCtx)
	stop()
	wg.Wait()
	return err
}
