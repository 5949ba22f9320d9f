package atleastonce

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/dedupkit/dedup"
)

// goka ends a processor whose context closes before its tables are up with
// an error of its own, not context.Canceled, and Run treats a stop then as a
// clean one by that error's text (startInterrupted). This runs goka's own
// processor on an in-process broker, so a goka upgrade that rewords the error
// fails here instead of turning stops during startup back into exit 1.
func TestStopWhileGokaStartsIsClean(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	topo := &dedup.Topology{Group: "startup", Inputs: []string{"orders"}, Outputs: []string{"orders-deduped"}, DLQ: "startup-dlq",
		KeyType: dedup.KeyEventID, Retention: dedup.DefaultRetention,
		EventID: dedup.JSONField("eventId"), Handler: dedup.Forward(), Logger: log}
	r, err := New(ctx, Config{Brokers: cluster.ListenAddrs(), StateDir: t.TempDir(), CommitInterval: 100 * time.Millisecond,
		Replication: 1, ClientID: "startup-test", Logger: log}, topo)
	if err != nil {
		t.Fatal(err)
	}
	stopped, stop := context.WithCancel(ctx)
	stop()

	// With its context already closed, goka picks at random between the end
	// of its (here empty) wait for tables and the context: try a few times.
	interrupted := false
	for i := 0; i < 50 && !interrupted; i++ {
		proc, err := r.newProc()
		if err != nil {
			t.Fatal(err)
		}
		err = proc.Run(stopped)
		if err != nil && !startInterrupted(err) {
			t.Fatalf("goka processor stopped at start: %v, want nil or %q", err, gokaStartInterrupted)
		}
		interrupted = err != nil
	}
	if !interrupted {
		t.Fatalf("goka never reported %q in 50 stops at start: reworded or gone?", gokaStartInterrupted)
	}
	if err := r.Run(stopped); err != nil {
		t.Fatalf("Run stopped at start: %v, want a clean stop", err)
	}
}

// Goka's runtime runs a partition's calls one at a time: a topology that
// asks for more is refused before anything connects, not run at one.
func TestNewRefusesConcurrency(t *testing.T) {
	topo, err := dedup.Define("g", dedup.Input("in"), dedup.Output("out"), dedup.Concurrency(8))
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(context.Background(), Config{Brokers: []string{"127.0.0.1:1"}, StateDir: t.TempDir(), CommitInterval: time.Second}, topo)
	if err == nil || !strings.Contains(err.Error(), "concurrency 8") {
		t.Fatalf("New: %v, want concurrency refused", err)
	}
}
