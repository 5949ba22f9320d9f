package bench_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dedupkit/dedup/bench/contenders"
	"github.com/dedupkit/dedup/bench/harness"
	"github.com/dedupkit/dedup/internal/kafkatest"
)

// TestSlowSmoke runs the slow-handler benchmark at toy size: a few hundred
// records, a 20 ms handler, a window of a few seconds, every row but those
// that only change a number (SlowSmokeContenders). Each row must hand events
// to the output, and every event below its committed offsets must be there
// exactly once. It reports figures, it does not judge speed.
func TestSlowSmoke(t *testing.T) {
	brokers := os.Getenv("KAFKA_BROKERS")
	if brokers == "" {
		kafkatest.Missing(t, "KAFKA_BROKERS is not set; `make test` starts a broker and sets it (or run `make bench-slow BENCHFLAGS='-cases 20ms:400 -window 3s -warmup 0s'`)")
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
	cfg := harness.SlowConfig{Brokers: strings.Split(brokers, ","), Cases: []harness.SlowCase{{Sleep: 20 * time.Millisecond, Records: 400}},
		Contenders: harness.SlowSmokeContenders(), DupRate: 0.2, Window: 3 * time.Second,
		Exe: exe, ExeEnv: []string{childEnv}, WorkDir: t.TempDir(), Command: "cd bench && go test -run SlowSmoke .", Log: testLog{t}}
	var skipped string
	if _, _, _, err := contenders.CheckKStreams(); err != nil {
		skipped = "the Kafka Streams and Parallel Consumer rows: " + err.Error()
		cfg.Contenders = slices.DeleteFunc(cfg.Contenders, func(name string) bool {
			for _, ct := range harness.SlowContenders() {
				if ct.Name == name {
					return ct.Kind == contenders.KStreams || ct.Kind == contenders.Parallel
				}
			}
			return false
		})
	}
	rep, err := harness.RunSlow(ctx, cfg)
	if rep != nil {
		var b strings.Builder
		rep.PrintTable(&b)
		t.Log("\n" + b.String())
	}
	if err != nil {
		t.Fatal(err)
	}
	ran := map[string]bool{}
	for _, r := range rep.Results {
		ran[r.Contender] = true
		if !r.Clean() {
			t.Errorf("%s: %d events handled, error %q; of %d committed input records: %d missing, %d duplicated, %d foreign",
				r.Contender, r.Events, r.Err, r.Committed, r.Correct.Missing, r.Correct.Duplicates, r.Correct.Foreign)
		}
		if r.Committed == 0 {
			t.Errorf("%s: nothing committed", r.Contender)
		}
	}
	for _, name := range cfg.Contenders {
		if !ran[name] {
			t.Errorf("%s did not run", name)
		}
	}
	if skipped != "" {
		kafkatest.Missing(t, "skipped %s", skipped)
	}
}
