package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/dedupkit/dedup/internal/atleastonce"
	"github.com/dedupkit/dedup/internal/memlimit"
	"github.com/dedupkit/dedup/internal/metrics"
	"github.com/dedupkit/dedup/internal/retention"
	"github.com/dedupkit/dedup/processor"
)

// worker is what both runtimes offer the command.
type worker interface {
	Run(ctx context.Context) error
	Ready() bool
}

// runWorker assembles the worker from cfg and runs it until ctx or forGood
// is done. forGood ends the run as ctx does and makes the stop leave the
// consumer group (processor.Processor.LeaveGroupOnStop): a stop for good.
func runWorker(ctx, forGood context.Context, cfg *Config, logOut *os.File) error {
	log := newLogger(cfg, logOut)
	logGuarantee(log, cfg.Guarantee)
	// Before anything big is allocated: a restore is the worker's memory peak.
	limit, err := memlimit.Apply(os.Getenv, cfg.MemLimitRatio)
	if err != nil {
		return fmt.Errorf("--memory-limit-ratio: reading the cgroup's memory limit (0 or GOMEMLIMIT starts without it): %w", err)
	}
	log.Info("memory limit", "source", limit.Source, "softLimitBytes", limit.Limit, "cgroupLimitBytes", limit.Cgroup)
	warnCleartext(cfg.Security, log)
	logPeersOff(cfg, log)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	topo, err := cfg.Topology()
	if err != nil {
		return err
	}

	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return fmt.Errorf("--state-dir: %w", err)
	}
	var w worker
	var mux *http.ServeMux
	// leave makes this stop leave the group; goka's best-effort members
	// are dynamic and leave on every stop already.
	leave := func() {}
	switch cfg.Guarantee {
	case ExactlyOnce:
		var p *processor.Processor
		p, err = processor.New(ctx, processor.Config{
			Brokers: cfg.Brokers, Security: cfg.Security, StateDir: cfg.StateDir, InstanceID: cfg.InstanceID,
			Threads: cfg.Threads, Replication: int16(cfg.Replication),
			Transactions: processor.Transactions{CommitInterval: cfg.CommitInterval, FenceStuckAfter: cfg.FenceStuckAfter},
			Group:        processor.Group{SessionTimeout: cfg.SessionTimeout, LeaveOnStop: cfg.LeaveGroup, StandbyReplicas: cfg.StandbyReplicas},
			Peers:        processor.Peers{Addr: cfg.peerAddr(), Advertise: cfg.PeerAdvertise, Secret: cfg.PeerSecret},
			Sweep:        processor.Sweep{Interval: cfg.SweepInterval},
			Health: processor.HealthBounds{ReadyAbortLimit: cfg.ReadyAbortLimit, ReadyStallAfter: cfg.ReadyStallAfter,
				LiveStallAfter: cfg.LiveStallAfter},
			Logger: log, Registerer: reg,
		}, topo)
		if err == nil {
			w, mux, leave = p, http.NewServeMux(), p.LeaveGroupOnStop
			mux.Handle("/", p.HTTPHandler())
		}
	default:
		m := metrics.New(reg, cfg.Group)
		run := *topo
		run.Hooks, run.Logger = append(slices.Clone(topo.Hooks), m), log
		var r *atleastonce.Runner
		r, err = atleastonce.New(ctx, atleastonce.Config{
			Brokers: cfg.Brokers, Security: cfg.Security, StateDir: cfg.StateDir, CommitInterval: cfg.CommitInterval,
			Replication: int16(cfg.Replication), ClientID: "dedup-" + cfg.Group, Logger: log,
			TableSize: m.OnTableSize, TableClosed: m.ForgetPartition, ConsumerLag: m.OnConsumerLag,
		}, &run)
		if err == nil {
			w, mux = r, metrics.Handler(reg, gokaHealth(r))
			metrics.RegisterHealth(reg, cfg.Group, gokaHealth(r))
			mux.Handle("GET /v1/seen/{id}", seenHandler(r))
		}
	}
	if err != nil {
		return err
	}
	// After the runtime checked that the input exists.
	if err := retention.Check(ctx, cfg.Brokers, cfg.Security, log, reg, topo, cfg.StrictRetention); err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopForGood := context.AfterFunc(forGood, func() {
		log.Info("asked to stop for good: the worker leaves the consumer group once it has committed")
		leave()
		cancel()
	})
	defer stopForGood()
	waitHTTP := func() error { return nil }
	if cfg.HTTPAddr != "" {
		waitHTTP, err = metrics.Serve(ctx, cfg.HTTPAddr, mux, log)
		if err != nil {
			return fmt.Errorf("--http-addr: %w", err)
		}
	}
	log.Info("worker starting", "guarantee", cfg.Guarantee, "group", cfg.Group, "inputs", cfg.Inputs,
		"output", cfg.Output, "dlq", cfg.DLQ, "keyType", cfg.KeyType, "retention", cfg.Retention)
	runErr := w.Run(ctx)
	cancel()
	err = errors.Join(runErr, waitHTTP())
	log.Info("worker stopped", "err", err)
	return err
}

// workerHealth is the runtime's health as the HTTP endpoints tell it.
// gokaHealth is the best-effort runtime's health: ready once its tables are
// recovered; nothing watches its commits, so it is always live.
func gokaHealth(r *atleastonce.Runner) func() metrics.Health {
	return func() metrics.Health {
		h := metrics.Health{Ready: r.Ready(), Live: true}
		if !h.Ready {
			h.Reasons = []string{"partitions are being assigned or their tables restored"}
		}
		return h
	}
}
