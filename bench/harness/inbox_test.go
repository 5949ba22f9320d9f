package harness

import (
	"strings"
	"testing"
)

// The inbox contender is judged as a multiple of postgres-processed's
// throughput, met from 5x on, and not measured without either row.
func TestInboxTarget(t *testing.T) {
	run := func(name string, secs float64) RunResult {
		return RunResult{Contender: name, Run: 1, Records: 1000, Seconds: secs, Throughput: 1000 / secs}
	}
	target := func(rep *Report) Target {
		for _, tg := range rep.Targets() {
			if strings.HasPrefix(tg.Name, "postgres-inbox") {
				return tg
			}
		}
		t.Fatal("no postgres-inbox target")
		return Target{}
	}
	both := Config{Contenders: []string{"postgres-processed", "postgres-inbox"}}
	for _, tt := range []struct {
		inboxSecs float64
		status    string
		got       string
	}{
		{0.2, "met", "5.00x postgres-processed (5000 vs 1000 events/s)"},
		{0.25, "MISS", "4.00x postgres-processed (4000 vs 1000 events/s)"},
	} {
		tg := target(&Report{Config: both, Runs: []RunResult{run("postgres-processed", 1), run("postgres-inbox", tt.inboxSecs)}})
		if tg.Status != tt.status || tg.Got != tt.got {
			t.Errorf("inbox in %vs: %s %q, want %s %q", tt.inboxSecs, tg.Status, tg.Got, tt.status, tt.got)
		}
	}
	tg := target(&Report{Config: Config{Contenders: []string{"postgres-inbox"}}, Runs: []RunResult{run("postgres-inbox", 1)}})
	if tg.Status != "n/a" {
		t.Errorf("without postgres-processed: %s %q, want n/a", tg.Status, tg.Got)
	}
}

// The inbox contender reads the same input as postgres-processed, the row
// it is set against, and gets the PostgreSQL server.
func TestInboxContender(t *testing.T) {
	in, per := contenderNamed("postgres-inbox"), contenderNamed("postgres-processed")
	if !in.slow() || !per.slow() || !in.usesPostgres() {
		t.Errorf("postgres-inbox: slow %v (postgres-processed %v), uses PostgreSQL %v", in.slow(), per.slow(), in.usesPostgres())
	}
	if in.NotInSmoke || in.Extra {
		t.Errorf("postgres-inbox must be in the smoke and judged: %+v", in)
	}
}
