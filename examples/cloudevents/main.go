// Command cloudevents is a shipping notifier fed by CloudEvents: it reads
// order events in CloudEvents structured mode (JSON), and for each event,
// once however often it was published, writes an analytics record and, for
// a shipped order, a notification to the customer.
//
//	go run ./examples/cloudevents                   # embedded broker, sample stream
//	go run ./examples/cloudevents --brokers k1:9092 --state-dir /var/lib/notifier
//
// See README.md for the event format and why the ID is read from the data.
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
	"github.com/dedupkit/dedup/processor"
)

// config is what the flags set.
type config struct {
	brokers    []string // empty: run on an embedded broker with a sample stream
	stateDir   string   // where the seen-ID stores live; keep it across restarts
	instanceID string   // this instance's stable name; empty: one persisted in stateDir
	group      string   // consumer group, also the prefix of its table, loop and dead-letter topics
	input      string
	notify     string // output topic of customer notifications
	analytics  string // output topic of analytics records
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
		cfg.log.Error("notifier stopped", "err", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	cfg := config{}
	fs := flag.NewFlagSet("cloudevents", flag.ContinueOnError)
	brokers := fs.String("brokers", "", "Kafka bootstrap servers, comma-separated; empty: embedded broker with a sample stream")
	fs.StringVar(&cfg.stateDir, "state-dir", "", "directory of the seen-ID stores, required with --brokers; keep it across restarts")
	fs.StringVar(&cfg.instanceID, "instance-id", "", "stable name of this instance, e.g. the pod name of a StatefulSet (default: one kept in --state-dir)")
	fs.StringVar(&cfg.group, "group", "shipping-notifier", "consumer group")
	fs.StringVar(&cfg.input, "input", "order.cloudevents", "input topic of CloudEvents in structured mode")
	fs.StringVar(&cfg.notify, "notifications", "notifications", "output topic of customer notifications, keyed by customer ID")
	fs.StringVar(&cfg.analytics, "analytics", "analytics", "output topic of analytics records (binary-mode CloudEvents)")
	verbose := fs.Bool("v", false, "in embedded mode, show the worker's logs")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if cfg.analytics == cfg.notify {
		// The library allows it; a consumer of either topic could not
		// tell the two kinds of record apart.
		return cfg, fmt.Errorf("--analytics: %q is also --notifications: notifications and analytics records need topics of their own", cfg.analytics)
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
		// The publisher wraps each event in a CloudEvent with a new "id"
		// on every publish call, a retry included, so "id" cannot tell
		// copies apart. The event's own ID is in its data: "data.eventId".
		// Records are keyed by order ID: the worker judges every event in
		// the partition its event ID hashes to, re-keying it through
		// "<group>-loop" when another member owns that one.
		dedup.EventID(dedup.JSONField("data.eventId")),
		dedup.Output(cfg.notify, cfg.analytics),
		dedup.Handle(handler(cfg.notify, cfg.analytics)))
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
	cfg.log.Info("notifier running", "group", cfg.group, "input", cfg.input, "outputs", top.Outputs, "dlq", top.DLQ)
	if err := p.Run(ctx); err != nil {
		return err
	}
	cfg.log.Info("notifier stopped: what it processed is committed")
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
	if cfg.stateDir, err = os.MkdirTemp("", "notifier-*"); err != nil {
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
	for _, topic := range []string{cfg.notify, cfg.analytics, top.DLQ} {
		recs, err := b.Read(ctx, topic)
		if err != nil {
			return err
		}
		fmt.Fprintln(out)
		embedded.PrintOutput(out, "OUT "+topic, recs)
	}
	return nil
}

// sample is a stream as a publisher that mints a CloudEvents id per publish
// call writes it: events keyed by order ID, one shipped event published
// twice at once and once more later (three CloudEvents ids, one event ID),
// an order created (analytics only), and two events the worker must reject.
func sample() []embedded.Record {
	ce := func(ceID, typ, order, data string) embedded.Record {
		return embedded.Record{Key: order, Value: fmt.Appendf(nil,
			`{"specversion":"1.0","id":%q,"source":"/orders","type":%q,"time":"2026-03-01T10:00:00Z","datacontenttype":"application/json","data":%s}`,
			ceID, typ, data)}
	}
	shippedData := func(id, order, customer, tracking string) string {
		return fmt.Sprintf(`{"eventId":%q,"orderId":%q,"customerId":%q,"carrier":"DHL","trackingCode":%q}`, id, order, customer, tracking)
	}
	return []embedded.Record{
		ce("ce-101", "com.example.order.created", "o-1", `{"eventId":"evt-1","orderId":"o-1","total":19.99}`),
		ce("ce-102", TypeShipped, "o-1", shippedData("evt-2", "o-1", "c-7", "JD014600")),
		ce("ce-103", TypeShipped, "o-1", shippedData("evt-2", "o-1", "c-7", "JD014600")), // a retried publish: new id, same event
		ce("ce-104", TypeShipped, "o-2", shippedData("evt-3", "o-2", "c-8", "JD014601")),
		ce("ce-105", TypeShipped, "o-3", `{"eventId":"evt-4","orderId":"o-3","customerId":42}`), // data does not parse: dead-lettered
		ce("ce-106", TypeShipped, "o-4", `{"orderId":"o-4","customerId":"c-9"}`),                // no data.eventId: dead-lettered
		ce("ce-107", TypeShipped, "o-1", shippedData("evt-2", "o-1", "c-7", "JD014600")),        // re-published much later
	}
}
