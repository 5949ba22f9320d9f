// Command inboxworker is the ledger example (examples/ledger) with the
// fault points its tests arm: it kills itself between the database commit
// and the Kafka commit, or stops itself inside its database transaction, and
// leaves the inbox's counts where a killed process can be read. Only the
// tests build it.
//
// Environment: INBOXWORKER_DSN (required), INBOXWORKER_KILL_AT_COMMIT=n
// (SIGKILL itself once the resources of its n-th commit committed, before
// the Kafka commit), INBOXWORKER_KILL_AFTER_COMMIT=n (SIGKILL itself once
// its n-th transaction committed in Kafka), INBOXWORKER_PAUSE_FILE=path (once path exists, SIGSTOP
// itself after an event's database work, writing path+".paused" first),
// INBOXWORKER_SESSION_TIMEOUT (the group session timeout).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/examples/ledger/debit"
	"github.com/dedupkit/dedup/inbox"
	"github.com/dedupkit/dedup/internal/faults"
	"github.com/dedupkit/dedup/processor"
)

func main() {
	brokers := flag.String("brokers", "", "Kafka bootstrap servers")
	stateDir := flag.String("state-dir", "", "state dir")
	instance := flag.String("instance-id", "", "instance ID")
	group := flag.String("group", "ledger", "consumer group")
	input := flag.String("input", "payments", "input topic")
	output := flag.String("output", "settlements", "output topic")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, strings.Split(*brokers, ","), *stateDir, *instance, *group, *input, *output); err != nil {
		log.Error("inboxworker stopped", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, brokers []string, stateDir, instance, group, input, output string) error {
	reg := prometheus.NewRegistry()
	db, ib, err := debit.Open(ctx, os.Getenv("INBOXWORKER_DSN"), inbox.Config{Group: group, Registerer: reg, Logger: log})
	if err != nil {
		return err
	}
	defer db.Close()
	counts := filepath.Join(stateDir, fmt.Sprintf("inbox-counts-%d", os.Getpid()))
	top, err := debit.Topology(group, input, output, ib.Handler(pausing(debit.Debit(output), os.Getenv("INBOXWORKER_PAUSE_FILE"))))
	if err != nil {
		return err
	}
	top.Logger = log
	cfg := processor.Config{Brokers: brokers, StateDir: stateDir, InstanceID: instance, Logger: log}
	if d, err := time.ParseDuration(os.Getenv("INBOXWORKER_SESSION_TIMEOUT")); err == nil {
		cfg.Group.SessionTimeout = d
	}
	killAt, _ := strconv.Atoi(os.Getenv("INBOXWORKER_KILL_AT_COMMIT"))
	killAfter, _ := strconv.Atoi(os.Getenv("INBOXWORKER_KILL_AFTER_COMMIT"))
	var commits, committed atomic.Int64
	ctx = faults.WithAfterResources(ctx, func() error {
		writeCounts(reg, counts)
		if n := commits.Add(1); killAt > 0 && n == int64(killAt) {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		return nil
	})
	ctx = faults.WithAfterCommit(ctx, func() error {
		if n := committed.Add(1); killAfter > 0 && n == int64(killAfter) {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		return nil
	})
	p, err := processor.New(ctx, cfg, top)
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { ib.RunSweeper(runCtx) })
	err = p.Run(runCtx)
	cancel()
	wg.Wait()
	writeCounts(reg, counts)
	return err
}

// pausing stops the process inside its database transaction, once file
// exists, after an event's work.
func pausing(fn inbox.Func, file string) inbox.Func {
	var paused atomic.Bool
	return func(ctx context.Context, tx *inbox.Tx, ev *dedup.Event) ([]dedup.Message, error) {
		msgs, err := fn(ctx, tx, ev)
		if file == "" || err != nil || paused.Load() {
			return msgs, err
		}
		if _, statErr := os.Stat(file); statErr == nil {
			paused.Store(true)
			if werr := os.WriteFile(file+".paused", []byte(ev.EventID), 0o644); werr != nil {
				return nil, werr
			}
			syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		} else if !errors.Is(statErr, os.ErrNotExist) {
			return nil, statErr
		}
		return msgs, err
	}
}

// writeCounts writes the inbox's counters, one "name value" per line.
func writeCounts(reg *prometheus.Registry, path string) {
	mfs, err := reg.Gather()
	if err != nil {
		return
	}
	var b strings.Builder
	for _, mf := range mfs {
		if m := mf.GetMetric(); len(m) == 1 && m[0].GetCounter() != nil {
			fmt.Fprintf(&b, "%s %v\n", mf.GetName(), m[0].GetCounter().GetValue())
		}
	}
	tmp := path + ".tmp"
	if os.WriteFile(tmp, []byte(b.String()), 0o644) == nil {
		os.Rename(tmp, path)
	}
}
