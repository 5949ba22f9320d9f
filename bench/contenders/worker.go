package contenders

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/atleastonce"
	"github.com/dedupkit/dedup/processor"
)

// Topology is the worker's graph as `processor run` builds it with its
// defaults: event-id dedup key from the "eventId" field, a week's retention,
// the forward handler (output = input event), 3 handler retries. With
// cfg.Sleep the handler sleeps first (SleepForward), and cfg.Concurrency is
// the topology's Concurrency.
func Topology(cfg Config) *dedup.Topology {
	handler := dedup.Forward()
	if cfg.Sleep > 0 {
		handler = SleepForward(cfg.Sleep)
	}
	return &dedup.Topology{
		Group: cfg.Group, Inputs: []string{cfg.Input}, Outputs: []string{cfg.Output}, DLQ: cfg.Group + "-dlq",
		KeyType: dedup.KeyEventID, Retention: dedup.DefaultRetention,
		EventID: dedup.JSONField("eventId"), Handler: handler,
		HandlerRetries: 3, RetryBackoff: 100 * time.Millisecond, Concurrency: cfg.Concurrency,
		StaleEvents: dedup.StaleProcess, Rekey: dedup.RekeyPolicy(cfg.Rekey), Logger: cfg.Logger,
	}
}

// SleepForward is the slow handler of docs/benchmarks-slow.md: it sleeps d,
// as a call to a slow service would take, giving up when ctx ends, then
// forwards the event as dedup.Forward does.
func SleepForward(d time.Duration) dedup.Handler {
	forward := dedup.Forward()
	return dedup.HandlerFunc(func(ctx context.Context, ev *dedup.Event) ([]dedup.Message, error) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, fmt.Errorf("sleeping handler: %w", ctx.Err())
		}
		return forward.Handle(ctx, ev)
	})
}

type readier interface {
	Run(ctx context.Context) error
	Ready() bool
}

// PeerSecretEnv holds the worker's peer secret, as for `processor run`:
// set, the exactly-once worker holds liveness connections to the others.
const PeerSecretEnv = "DEDUP_PEER_SECRET"

// runWorker runs this project's worker in-process, exactly as the binary's
// `run` command wires it (without the HTTP endpoint and Prometheus metrics).
// For postgres-inbox it is the exactly-once worker with inboxHandler in
// place of the forward handler.
func runWorker(ctx context.Context, cfg Config, ready func()) error {
	topo := Topology(cfg)
	if cfg.Kind == PostgresInbox {
		times := &inboxTimes{reg: prometheus.NewRegistry()}
		db, ib, err := openInbox(cfg.PostgresDSN, cfg.Group, max(cfg.Threads, 1), times.reg)
		if err != nil {
			return fmt.Errorf("inbox: %w", err)
		}
		defer db.Close()
		topo.Handler = inboxHandler(ib, times)
		if cfg.InboxStats != nil {
			defer func() { cfg.InboxStats(times.stats()) }()
		}
	}
	var (
		w   readier
		err error
	)
	if cfg.Kind == Exactly || cfg.Kind == PostgresInbox {
		pc := processor.Config{Brokers: cfg.Brokers, StateDir: cfg.StateDir,
			Threads: cfg.Threads, InstanceID: cfg.InstanceID,
			Transactions: processor.Transactions{CommitInterval: cfg.CommitInterval},
			Group:        processor.Group{SessionTimeout: cfg.SessionTimeout, StandbyReplicas: cfg.StandbyReplicas}, Logger: cfg.Logger, Hooks: cfg.Hooks}
		if secret := os.Getenv(PeerSecretEnv); secret != "" {
			// As `processor run` with a peer secret: liveness connections,
			// on any free port since the instances share a host.
			pc.Peers.Addr, pc.Peers.Secret = ":0", []byte(secret)
		}
		w, err = processor.New(ctx, pc, topo)
	} else {
		w, err = atleastonce.New(ctx, atleastonce.Config{Brokers: cfg.Brokers, StateDir: cfg.StateDir,
			CommitInterval: cfg.CommitInterval, Replication: -1, ClientID: "bench-" + cfg.Group,
			Logger: cfg.Logger}, topo)
	}
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if p, ok := w.(*processor.Processor); ok && cfg.Leave != nil {
		go func() { // SIGUSR1: a stop for good, as `processor run` does it
			select {
			case <-cfg.Leave:
				p.LeaveGroupOnStop()
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			if w.Ready() {
				ready()
				return <-done
			}
		}
	}
}
