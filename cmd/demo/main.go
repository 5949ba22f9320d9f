// Command demo runs the exactly-once worker on an embedded Kafka-protocol
// broker (franz-go's kfake) with a sample stream and prints what came in,
// what was skipped and what came out: `make demo`, no services needed.
//
//	demo [--handler forward|settlements] [--guarantee exactly-once|best-effort] [-v]
//
// It is a command of its own so that the worker binary (cmd/processor) links
// neither the embedded broker nor the examples' handlers.
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
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/examples/settlement/settle"
	"github.com/dedupkit/dedup/internal/atleastonce"
	"github.com/dedupkit/dedup/internal/guarantee"
	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/internal/kafkautil"
	"github.com/dedupkit/dedup/internal/wire"
	"github.com/dedupkit/dedup/processor"
)

// guaranteeText is what the worker promises under each --guarantee value,
// for the demo's header.
var guaranteeText = map[string]string{
	guarantee.ExactlyOnce: "exactly-once: an event's outputs and dead letters, its seen mark and its input offset commit together in one Kafka transaction",
	guarantee.BestEffort:  "best-effort (goka's runtime): a crash or kill can lose or duplicate events",
}

// worker is what both runtimes offer the demo.
type worker interface {
	Run(ctx context.Context) error
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := runDemo(ctx, os.Args[1:], os.Stdout)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", kafkautil.Named(err))
		os.Exit(1)
	}
}

func handlerByName(name string) (dedup.Handler, error) {
	switch name {
	case "forward":
		return dedup.Forward(), nil
	case "settlements":
		return settle.Handler("", ""), nil
	}
	return nil, fmt.Errorf("%q is not forward or settlements", name)
}

// demoObserver counts what the demo prints.
type demoObserver struct {
	processed, skipped, dead atomic.Int64
}

func (o *demoObserver) OnProcessed(int32, time.Duration) { o.processed.Add(1) }
func (o *demoObserver) OnSkipped(int32)                  { o.skipped.Add(1) }
func (o *demoObserver) OnDeadLettered(string)            { o.dead.Add(1) }

// demoStream is the sample input: OrderPaid events keyed by order, with the
// duplicates a real producer makes (an immediate retry, a re-publish much
// later at a new offset) and three records no worker can decode.
func demoStream() (recs []kafkatest.Record, distinct int) {
	event := func(id, order, payment string, amount float64) kafkatest.Record {
		v := fmt.Sprintf(`{"eventId":%q,"aggregateId":%q,"type":"OrderPaid","occurredAt":%q,"payload":{"orderId":%q,"paymentId":%q,"amount":%.2f}}`,
			id, order, time.Now().UTC().Format(time.RFC3339), order, payment, amount)
		return kafkatest.Record{Key: order, Value: []byte(v)}
	}
	e := []kafkatest.Record{
		event("evt-1", "order-1", "pay-1", 19.99), event("evt-2", "order-2", "pay-2", 5.00),
		event("evt-3", "order-3", "pay-3", 42.10), event("evt-4", "order-1", "pay-4", 7.25),
		event("evt-5", "order-4", "pay-5", 99.00), event("evt-6", "order-2", "pay-6", 12.00),
	}
	recs = []kafkatest.Record{
		e[0], e[1], e[1], // evt-2 retried by its producer at once
		e[2], {Key: "order-9", Value: []byte("this is not JSON")},
		e[3], e[4], e[4], // evt-5 retried
		{Key: "order-9", Value: []byte(`{"aggregateId":"order-9","type":"OrderPaid"}`)}, // no eventId
		e[5], {Key: "order-9", Value: []byte{}}, // empty value
		e[0], e[2], // evt-1 and evt-3 re-published later, new offsets
	}
	return recs, len(e)
}

// runDemo starts an in-process Kafka-protocol broker (kfake), writes the
// sample stream, runs the worker on it and prints what came in, what was
// skipped and what came out.
func runDemo(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	handler := fs.String("handler", "forward", "business handler: forward (the dedup bridge) or settlements (examples/settlement's)")
	verbose := fs.Bool("v", false, "show the worker's logs")
	mode := fs.String("guarantee", guarantee.ExactlyOnce, "exactly-once or best-effort (goka's runtime: a crash or kill can lose or duplicate events)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err := guarantee.Check(*mode); err != nil {
		return fmt.Errorf("--guarantee: %w", err)
	}
	h, err := handlerByName(*handler)
	if err != nil {
		return fmt.Errorf("--handler: %w", err)
	}
	logLevel := slog.LevelError
	if *verbose {
		logLevel = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel}))

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"))
	if err != nil {
		return fmt.Errorf("start embedded broker: %w", err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	fmt.Fprintf(out, "embedded Kafka-protocol broker (kfake) on %v, topic orders with 3 partitions\nworker %s\n\n", brokers, guaranteeText[*mode])

	stream, distinct := demoStream()
	written, err := kafkatest.Produce(brokers, "orders", stream)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "IN  orders: %d records, %d distinct events\n", len(written), distinct)
	for _, r := range written {
		fmt.Fprintf(out, "    p%d@%-2d key=%-8s %s\n", r.Partition, r.Offset, r.Key, describe(r.Value))
	}

	stateDir, err := os.MkdirTemp("", "dedup-demo-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stateDir)
	obs := &demoObserver{}
	topo := &dedup.Topology{
		Group: "demo", Inputs: []string{"orders"}, Outputs: []string{"orders-deduped"}, DLQ: "demo-dlq",
		KeyType: dedup.KeyEventID, Retention: dedup.DefaultRetention,
		EventID: dedup.JSONField("eventId"), Handler: h, Hooks: []dedup.Hook{obs}, Logger: log,
	}
	if *handler == "settlements" {
		topo.Outputs = []string{"settlements"}
	}
	var runner worker
	if *mode == guarantee.BestEffort {
		runner, err = atleastonce.New(ctx, atleastonce.Config{Brokers: brokers, StateDir: stateDir,
			CommitInterval: 100 * time.Millisecond, Replication: 1, ClientID: "dedup-demo", Logger: log}, topo)
	} else {
		runner, err = processor.New(ctx, processor.Config{Brokers: brokers, StateDir: stateDir, Replication: 1, Logger: log}, topo)
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- runner.Run(runCtx) }()
	// Done when the input and then the loop topic (events keyed by order are
	// re-keyed by event ID through it) are committed to their ends.
	waitErr := kafkatest.WaitCommitted(ctx, brokers, topo.Group, topo.Inputs[0])
	if waitErr == nil {
		waitErr = kafkatest.WaitCommitted(ctx, brokers, topo.Group, topo.LoopTopic())
	}
	stop()
	if err := errors.Join(waitErr, <-done); err != nil {
		return fmt.Errorf("worker: %w", err)
	}

	outRecs, err := kafkatest.ReadAll(ctx, brokers, topo.Outputs[0])
	if err != nil {
		return err
	}
	dlq, err := kafkatest.ReadAll(ctx, brokers, topo.DLQ)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nSKIPPED as duplicates: %d\n", obs.skipped.Load())
	fmt.Fprintf(out, "\nOUT %s: %d records (one per distinct event)\n", topo.Outputs[0], len(outRecs))
	for _, r := range outRecs {
		fmt.Fprintf(out, "    key=%-8s %s\n", r.Key, describe(r.Value))
	}
	fmt.Fprintf(out, "\nDEAD-LETTERED to %s: %d records\n", topo.DLQ, len(dlq))
	for _, r := range dlq {
		fmt.Fprintf(out, "    reason=%-12s %s\n", r.Headers[dedup.HeaderDLQReason], r.Headers[dedup.HeaderDLQError])
	}
	if int(obs.processed.Load()) != distinct {
		return fmt.Errorf("processed %d events, want %d", obs.processed.Load(), distinct)
	}
	return nil
}

// describe shortens a record value for the demo's listing.
func describe(v []byte) string {
	ev, err := wire.Decoder{ID: wire.DefaultIDSource()}.Decode(v, nil)
	if err != nil {
		var de *wire.DecodeError
		if errors.As(err, &de) {
			return fmt.Sprintf("(%s) %q", wire.Reason(err), truncate(string(v), 40))
		}
		return fmt.Sprintf("(undecodable) %v", err)
	}
	if ev.Type == "" {
		return truncate(string(v), 80)
	}
	return fmt.Sprintf("%s %s %s", ev.EventID, ev.Type, truncate(string(ev.Payload), 60))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
