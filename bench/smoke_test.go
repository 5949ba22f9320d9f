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

// childEnv marks a re-executed test binary as a contender process: the
// harness runs every contender as a process of its own, and here that
// process is this test binary.
const childEnv = "DEDUP_BENCH_CONTENDER=1"

func TestMain(m *testing.M) {
	if os.Getenv("DEDUP_BENCH_CONTENDER") == "1" && len(os.Args) > 1 && os.Args[1] == "contender" {
		os.Exit(contenders.Main(os.Args[2:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// testLog forwards the harness's progress lines to t.Log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestSmoke is the one-minute smoke of the benchmark: every contender reads
// a small input once and is measured at a small offered load, and every
// distinct event must come out exactly once (every record, for the raw
// pipe). It reports figures, it does not judge speed.
func TestSmoke(t *testing.T) {
	brokers := os.Getenv("KAFKA_BROKERS")
	if brokers == "" {
		kafkatest.Missing(t, "KAFKA_BROKERS is not set; `make test` starts a broker and sets it (or run `make bench-smoke`)")
	}
	if testing.Short() {
		t.Skip("-short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := harness.Config{Brokers: strings.Split(brokers, ","), Records: 4000, Runs: 1, DupRate: 0.2,
		Rate: 500, LatencySeconds: 2, LatencyWarmup: 500 * time.Millisecond, RestoreRecords: 20000,
		Exe: exe, ExeEnv: []string{childEnv}, WorkDir: t.TempDir(), InstallServices: os.Geteuid() == 0,
		RunTimeout: 3 * time.Minute, Command: "cd bench && go test -run Smoke .", Log: testLog{t}}
	// Without Redis or PostgreSQL (not installed and not installable), or
	// without java and mvn for Kafka Streams, the other contenders still run;
	// the test then ends skipped, saying why.
	cfg.Contenders = harness.SmokeContenders()
	var skipped []string
	skip := map[contenders.Kind]bool{}
	if err := harness.CheckServices(ctx, cfg.InstallServices, func(s string) { t.Log(strings.TrimSpace(s)) }); err != nil {
		skipped = append(skipped, "the Redis and PostgreSQL contenders: "+err.Error())
		skip[contenders.Redis], skip[contenders.Postgres], skip[contenders.PostgresInbox] = true, true, true
	}
	if _, _, _, err := contenders.CheckKStreams(); err != nil {
		skipped = append(skipped, "the Kafka Streams contenders: "+err.Error())
		skip[contenders.KStreams] = true
	}
	cfg.Contenders = slices.DeleteFunc(cfg.Contenders, func(name string) bool {
		for _, ct := range harness.Contenders() {
			if ct.Name == name {
				return skip[ct.Kind]
			}
		}
		return false
	})
	rep, err := harness.Run(ctx, cfg)
	if rep != nil {
		var b strings.Builder
		rep.PrintTable(&b)
		t.Log("\n" + b.String())
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range rep.Errors {
		t.Error(e)
	}
	ran := map[string]bool{}
	for _, r := range rep.Runs {
		ran[r.Contender] = true
		c := r.Correct
		if c.Missing > 0 || c.Duplicates > 0 || c.Foreign > 0 || c.Outputs != c.Expected {
			t.Errorf("%s: %d outputs for %d expected: %d missing, %d duplicated, %d foreign",
				r.Contender, c.Outputs, c.Expected, c.Missing, c.Duplicates, c.Foreign)
		}
	}
	for _, l := range rep.Latency {
		if l.Correct.Missing > 0 || l.Correct.Duplicates > 0 || len(l.Latencies) == 0 {
			t.Errorf("%s latency run: %d missing, %d duplicated, %d latency samples",
				l.Contender, l.Correct.Missing, l.Correct.Duplicates, len(l.Latencies))
		}
	}
	for _, ct := range harness.Contenders() {
		if !ran[ct.Name] && (cfg.Contenders == nil || slices.Contains(cfg.Contenders, ct.Name)) {
			t.Errorf("%s did not run", ct.Name)
		}
	}
	if rep.Restore == nil || rep.Restore.Records != int64(cfg.RestoreRecords) {
		t.Errorf("restore: %+v", rep.Restore)
	}
	if len(skipped) > 0 {
		kafkatest.Missing(t, "skipped %s", strings.Join(skipped, "; "))
	}
}
