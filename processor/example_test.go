package processor_test

import (
	"context"
	"log"
	"net/http"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/processor"
)

// Run a topology exactly-once, with its metrics, health, readiness and
// table inspection on :8080. (Not run by go test: it needs a broker.)
func ExampleNew() {
	top, err := dedup.Define("settlement-service",
		dedup.Input("order.events"),
		dedup.Output("settlements"),
		dedup.HandleFunc(func(ctx context.Context, ev *dedup.Event) ([]dedup.Message, error) {
			return []dedup.Message{{Key: ev.Key, Value: ev.Value}}, nil
		}))
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	reg := prometheus.NewRegistry()
	p, err := processor.New(ctx, processor.Config{
		Brokers:    []string{"127.0.0.1:9092"},
		StateDir:   "/var/lib/settlement",
		InstanceID: "settlement-0", // stable across restarts: a StatefulSet's pod name
		Registerer: reg,
	}, top)
	if err != nil {
		log.Fatal(err)
	}
	go http.ListenAndServe(":8080", p.HTTPHandler())
	if err := p.Run(ctx); err != nil { // until SIGTERM: then it commits and leaves
		log.Fatal(err)
	}
}
