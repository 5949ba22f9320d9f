package bench_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dedupkit/dedup/bench/harness"
	"github.com/dedupkit/dedup/internal/kafkatest"
)

// TestFailoverSmoke runs the failover benchmark at toy size: one kill -9 of
// one of three exactly-once instances, restarted at once, under a small
// steady load. The gap must be measured and the output exactly-once.
func TestFailoverSmoke(t *testing.T) {
	brokers := os.Getenv("KAFKA_BROKERS")
	if brokers == "" {
		kafkatest.Missing(t, "KAFKA_BROKERS is not set; `make test` starts a broker and sets it (or run `make bench-failover BENCHFLAGS=-quick`)")
	}
	if testing.Short() {
		t.Skip("-short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := harness.FailoverConfig{Brokers: strings.Split(brokers, ","), IDs: 2000, Rate: 1000, DupRate: 0.2, Repeat: 1,
		Scenarios: []string{"kill-restart"}, EventTimeout: time.Minute,
		Exe: exe, ExeEnv: []string{childEnv}, WorkDir: t.TempDir(), Command: "cd bench && go test -run FailoverSmoke .", Log: testLog{t}}
	rep, err := harness.RunFailover(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rep.PrintTable(&b)
	t.Log("\n" + b.String())
	if len(rep.Results) != 1 {
		t.Fatalf("%d scenario results, want 1", len(rep.Results))
	}
	r := rep.Results[0]
	if !r.Clean() {
		t.Errorf("not exactly-once or failed: %+v, error %q", r.Correct, r.Err)
	}
	if len(r.Gaps) != 1 || r.Gaps[0] <= 0 || r.Affected[0] == 0 {
		t.Errorf("gaps %v over %v affected partitions: want one measured gap", r.Gaps, r.Affected)
	}
}
