package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/dedupkit/dedup/atleastonce"
	"github.com/dedupkit/dedup/internal/memlimit"
	"github.com/dedupkit/dedup/metrics"
	"github.com/dedupkit/dedup/processor"
)

// worker is what both runtimes offer the command.
type worker interface {
	Run(ctx context.Context) error
	Ready() bool
}

// runWorker assembles the worker from cfg and runs it until ctx is done.
func runWorker(ctx context.Context, cfg *Config, logOut *os.File) error {
	log := newLogger(cfg, logOut)
	// Before anything big is allocated: a restore is the worker's memory peak.
	limit, err := memlimit.Apply(os.DirFS("/"), os.Getenv, cfg.MemLimitRatio)
	if err != nil {
		return fmt.Errorf("--memory-limit-ratio: reading the cgroup's memory limit: %w", err)
	}
	log.Info("memory limit", "source", limit.Source, "softLimitBytes", limit.Limit, "cgroupLimitBytes", limit.Cgroup)
	warnCleartext(cfg.Security, log)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(reg, cfg.Group)
	topo := cfg.Topology(m, log)

	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return fmt.Errorf("--state-dir: %w", err)
	}
	var w worker
	switch cfg.Guarantee {
	case ExactlyOnce:
		w, err = processor.New(ctx, processor.Config{
			Brokers: cfg.Brokers, Security: cfg.Security, StateDir: cfg.StateDir, CommitInterval: cfg.CommitInterval,
			Threads: cfg.Threads, SessionTimeout: cfg.SessionTimeout, SweepInterval: cfg.SweepInterval, Replication: int16(cfg.Replication), Logger: log,
			ReadyAbortLimit: cfg.ReadyAbortLimit, ReadyStallAfter: cfg.ReadyStallAfter, LiveStallAfter: cfg.LiveStallAfter,
			Hooks: metrics.NewRuntime(reg, m, cfg.Group),
		}, topo)
	default:
		w, err = atleastonce.New(ctx, atleastonce.Config{
			Brokers: cfg.Brokers, Security: cfg.Security, StateDir: cfg.StateDir, CommitInterval: cfg.CommitInterval,
			Replication: int16(cfg.Replication), ClientID: "dedup-" + cfg.Group, Logger: log,
			TableSize: m.TableSize, TableClosed: m.ForgetPartition,
		}, topo)
	}
	if err != nil {
		return err
	}
	// After the runtime checked that the input exists.
	if err := checkRetention(ctx, cfg, log); err != nil {
		return err
	}

	health := workerHealth(w)
	metrics.RegisterHealth(reg, cfg.Group, health)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waitHTTP := func() error { return nil }
	if cfg.HTTPAddr != "" {
		mux := metrics.Handler(reg, health)
		mux.Handle("GET /v1/seen/{id}", seenHandler(cfg, w))
		waitHTTP, err = metrics.Serve(ctx, cfg.HTTPAddr, mux, log)
		if err != nil {
			return fmt.Errorf("--http-addr: %w", err)
		}
	}
	log.Info("worker starting", "guarantee", cfg.Guarantee, "group", cfg.Group, "input", cfg.Input,
		"output", cfg.Output, "dlq", cfg.DLQ, "keyType", cfg.KeyType, "retention", cfg.Retention)
	runErr := w.Run(ctx)
	cancel()
	err = errors.Join(runErr, waitHTTP())
	log.Info("worker stopped", "err", err)
	return err
}

// workerHealth is the runtime's health as the HTTP endpoints tell it.
func workerHealth(w worker) func() metrics.Health {
	p, ok := w.(*processor.Processor)
	if !ok {
		// goka's runtime: ready once its tables are recovered; nothing
		// watches its commits, so it is always live.
		return func() metrics.Health {
			h := metrics.Health{Ready: w.Ready(), Live: true}
			if !h.Ready {
				h.Reasons = []string{"partitions are being assigned or their tables restored"}
			}
			return h
		}
	}
	return func() metrics.Health { return exactlyOnceHealth(p.Health(), time.Now()) }
}

func exactlyOnceHealth(ph processor.Health, now time.Time) metrics.Health {
	h := metrics.Health{Ready: ph.Ready, Live: ph.Live, Reasons: ph.Reasons, ConsecutiveAborts: ph.ConsecutiveAborts,
		UncommittedSeconds: ph.Uncommitted.Seconds(), CommitChecks: true}
	if !ph.LastCommit.IsZero() {
		s := now.Sub(ph.LastCommit).Seconds()
		h.SinceCommitSeconds = &s
	}
	return h
}
