// Command settlement is the settlement service: it reads order events, and
// for each OrderPaid event writes one settlement (keyed by payment ID) and
// one audit record, exactly once, however often the producer re-sent it.
//
//	go run ./examples/settlement                   # embedded broker, sample stream
//	go run ./examples/settlement --brokers k1:9092 --state-dir /var/lib/settlement
//
// See README.md for what it does and how a database sink should consume it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/examples/internal/embedded"
	"github.com/dedupkit/dedup/examples/settlement/settle"
	"github.com/dedupkit/dedup/processor"
)

// config is what the flags set.
type config struct {
	brokers    []string // empty: run on an embedded broker with a sample stream
	stateDir   string   // where the seen-ID stores live; keep it across restarts
	instanceID string   // this instance's stable name; empty: one persisted in stateDir
	group      string   // consumer group, also the prefix of its table, loop and dead-letter topics
	input      string
	settle     string // output topic of settlements
	audit      string // output topic of audit records
	log        *slog.Logger
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
	// SIGTERM (Kubernetes, systemd) and Ctrl-C stop the worker cleanly: it
	// commits what it has processed and exits.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		cfg.log.Error("settlement stopped", "err", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	cfg := config{}
	fs := flag.NewFlagSet("settlement", flag.ContinueOnError)
	brokers := fs.String("brokers", "", "Kafka bootstrap servers, comma-separated; empty: embedded broker with a sample stream")
	fs.StringVar(&cfg.stateDir, "state-dir", "", "directory of the seen-ID stores, required with --brokers; keep it across restarts")
	fs.StringVar(&cfg.instanceID, "instance-id", "", "stable name of this instance, e.g. the pod name of a StatefulSet (default: one kept in --state-dir)")
	fs.StringVar(&cfg.group, "group", "settlement-service", "consumer group")
	fs.StringVar(&cfg.input, "input", "order.events", "input topic of order events")
	fs.StringVar(&cfg.settle, "settlements", "settlements", "output topic of settlements, keyed by payment ID")
	fs.StringVar(&cfg.audit, "audit", "audit", "output topic of audit records, keyed by event ID")
	verbose := fs.Bool("v", false, "in embedded mode, show the worker's logs")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if cfg.audit == cfg.settle {
		// The library allows it; a consumer of either topic could not
		// tell the two kinds of record apart.
		return cfg, fmt.Errorf("--audit: %q is also --settlements: settlements and audit records need topics of their own", cfg.audit)
	}
	level := slog.LevelInfo
	if *brokers != "" {
		cfg.brokers = strings.Split(*brokers, ",")
		if cfg.stateDir == "" {
			return cfg, errors.New("--state-dir: required with --brokers: the seen event IDs live there, and a restart must find them")
		}
	} else {
		if cfg.stateDir != "" {
			return cfg, errors.New("--state-dir: only with --brokers: the embedded broker forgets everything when the demo ends, so a state dir would not match it the next time")
		}
		if !*verbose {
			level = slog.LevelError // keep the demo's printout readable
		}
	}
	cfg.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	return cfg, nil
}

// topology is the whole service: where events come from, how an event is
// identified, and what the handler writes.
func topology(cfg config) (*dedup.Topology, error) {
	return dedup.Define(cfg.group,
		dedup.Input(cfg.input),
		// The producer puts a unique "eventId" in every event and keeps it
		// when it re-sends. Records are keyed by order ID, so copies of an
		// event may sit in different partitions: the worker judges every
		// event in the partition its event ID hashes to (re-keying it
		// through "<group>-loop" when another member owns that one), so
		// the copies meet.
		dedup.EventID(dedup.JSONField("eventId")),
		dedup.Output(cfg.settle, cfg.audit),
		dedup.Handle(settle.Handler(cfg.settle, cfg.audit)))
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
	cfg.log.Info("settlement running", "group", cfg.group, "input", cfg.input, "outputs", top.Outputs, "dlq", top.DLQ)
	if err := p.Run(ctx); err != nil {
		return err
	}
	cfg.log.Info("settlement stopped: what it processed is committed")
	return nil
}

// demo starts an embedded broker, writes the sample stream, runs the worker
// until it has committed all of it, and prints what came out. A copy of
// this program for your service drops demo, sample and package embedded.
func demo(ctx context.Context, cfg config, top *dedup.Topology, out io.Writer) error {
	b, err := embedded.Start(cfg.input, 3)
	if err != nil {
		return err
	}
	defer b.Close()
	in, err := b.Produce(cfg.input, sample())
	if err != nil {
		return err
	}
	embedded.PrintInput(out, "IN "+cfg.input, in)
	if cfg.stateDir, err = os.MkdirTemp("", "settlement-*"); err != nil {
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
	waitErr := b.WaitCommitted(ctx, top.Group, cfg.input, top.LoopTopic())
	stop()
	if err := errors.Join(waitErr, <-done); err != nil {
		return err
	}
	for _, topic := range []string{cfg.settle, cfg.audit, top.DLQ} {
		recs, err := b.Read(ctx, topic)
		if err != nil {
			return err
		}
		fmt.Fprintln(out)
		embedded.PrintOutput(out, "OUT "+topic, recs)
	}
	return nil
}

// sample is a stream as a real producer writes it: OrderPaid events keyed by
// order ID, two of them re-sent (once at once, once much later), an event of
// another type, and two events the service must reject.
func sample() []embedded.Record {
	ev := func(id, typ, order, payload string) embedded.Record {
		return embedded.Record{Key: order, Value: fmt.Appendf(nil,
			`{"eventId":%q,"aggregateId":%q,"type":%q,"occurredAt":"2026-03-01T10:00:00Z","payload":%s}`,
			id, order, typ, payload)}
	}
	paid := func(id, order, payment string, amount float64) embedded.Record {
		return ev(id, "OrderPaid", order, fmt.Sprintf(`{"orderId":%q,"paymentId":%q,"amount":%.2f}`, order, payment, amount))
	}
	e1, e2 := paid("evt-1", "order-1", "pay-1", 19.99), paid("evt-2", "order-2", "pay-2", 5)
	return []embedded.Record{
		e1, e2, e2, // evt-2 retried by its producer at once
		paid("evt-3", "order-3", "pay-3", 42.1),
		ev("evt-4", "OrderShipped", "order-1", `{"carrier":"DHL"}`), // not a payment: no output
		paid("evt-5", "order-4", "", 10),                            // no paymentId: dead-lettered
		{Key: "order-5", Value: []byte(`{"type":"OrderPaid"}`)},     // no eventId: dead-lettered
		e1, // evt-1 re-published later, at a new offset
	}
}
