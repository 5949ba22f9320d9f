package atleastonce

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/codecs"
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
		Table:    dedup.Table{KeyType: dedup.KeyEventID, Retention: dedup.DefaultRetention},
		IDSource: codecs.DefaultIDSource(), Handler: dedup.Forward(), Logger: log}
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
