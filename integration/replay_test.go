package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/groupadmin"
	"github.com/dedupkit/dedup/internal/kafkatest"
)

// run runs the processor binary and returns its combined output and exit code.
func runBin(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if exit, ok := err.(*exec.ExitError); ok {
		return string(out), exit.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// waitInactive waits until the group has no members: a stopped worker with
// static membership stays registered until its session times out.
func (e *env) waitInactive(group string) {
	e.t.Helper()
	admin, err := sarama.NewClusterAdmin(e.brokers, kafkatest.Config())
	if err != nil {
		e.t.Fatal(err)
	}
	defer admin.Close()
	until(e.t, 60*time.Second, "group "+group+" to have no members", func() bool {
		return groupadmin.CheckInactive(admin, group) == nil
	})
}

func TestReplayAndInspection(t *testing.T) {
	e := newEnv(t, 3)
	bin := buildProcessor(t)
	group := e.group("replay")
	state := t.TempDir()
	args := workerArgs(e, group, state, "--session-timeout", "3s")
	in := events("p", 20)
	e.produce(in...)

	p := startProc(t, bin, args...)
	e.waitProcessed(group)

	// Inspection on the live worker: a looped event is found with its source.
	var ans struct {
		Found  bool
		Record struct {
			SourceTopic  string
			SourceOffset int64
		}
		Note string
	}
	getJSON(t, p.base+"/v1/seen/p-3", http.StatusOK, &ans)
	if !ans.Found || ans.Record.SourceTopic != e.input {
		t.Fatalf("GET /v1/seen/p-3: %+v", ans)
	}
	getJSON(t, p.base+"/v1/seen/never-seen", http.StatusNotFound, &ans)
	if ans.Found || ans.Note == "" {
		t.Fatalf("GET /v1/seen/never-seen: %+v", ans)
	}

	// A reset while the worker runs is refused, and says so first; a dry run
	// changes nothing. Neither's table of offsets reads as applied.
	reset := []string{"reset-offsets", "--brokers", strings.Join(e.brokers, ","), "--group", group, "--input", e.input}
	notApplied := func(what string, out string, code, wantCode int, first string) {
		t.Helper()
		if code != wantCode || !strings.HasPrefix(out, first) || !strings.Contains(out, "NEW (NOT APPLIED)") ||
			strings.Contains(out, "NEW (APPLIED)") || strings.Contains(out, "moved on") {
			t.Fatalf("%s: exit %d, want %d, the output led by %q with a table NOT APPLIED:\n%s", what, code, wantCode, first, out)
		}
		t.Logf("%s:\n%s", what, out)
	}
	out, code := runBin(t, bin, append(reset, "--to", "earliest")...)
	notApplied("reset-offsets with a live worker", out, code, 1, "refused: group has live members")
	out, code = runBin(t, bin, append(reset, "--to", "earliest", "--dry-run")...)
	notApplied("dry run with a live worker", out, code, 0, "dry run: nothing changed")
	if !strings.Contains(out, "a reset now would be refused: group has live members") {
		t.Fatalf("dry run with a live worker does not say a reset would be refused:\n%s", out)
	}
	p.term()
	e.waitInactive(group)
	out, code = runBin(t, bin, append(reset, "--to", "earliest", "--dry-run")...)
	notApplied("dry run", out, code, 0, "dry run: nothing changed")
	if strings.Contains(out, "refused") {
		t.Fatalf("dry run of a stopped group says a reset would be refused:\n%s", out)
	}

	// Table inspection of the stopped worker.
	out, code = runBin(t, bin, "table", "stats", "--group", group, "--state-dir", state)
	total := ""
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "total" {
			total = f[1]
		}
	}
	if code != 0 || total != "20" {
		t.Fatalf("table stats: exit %d, total %q, want 20\n%s", code, total, out)
	}
	if out, code := runBin(t, bin, "table", "get", "p-3", "--group", group, "--state-dir", state); code != 0 || !strings.Contains(out, `"sourceTopic": "`+e.input+`"`) {
		t.Fatalf("table get: exit %d\n%s", code, out)
	}

	// Replay against the existing table: everything is skipped and counted.
	if out, code := runBin(t, bin, append(reset, "--to", "earliest")...); code != 0 || !strings.Contains(out, "NEW (APPLIED)") ||
		strings.Contains(out, "NOT APPLIED") {
		t.Fatalf("reset-offsets: exit %d, want 0 and a table APPLIED\n%s", code, out)
	}
	p = startProc(t, bin, args...)
	e.waitProcessed(group)
	if skipped := p.metric("dedup_duplicates_skipped_total"); skipped != 20 {
		t.Fatalf("replay skipped %v events, want 20", skipped)
	}
	p.term()
	e.exactlyOnce(in)

	// Replay from scratch: delete the table, reset, every event again.
	e.waitInactive(group)
	base := []string{"reset-state", "--brokers", strings.Join(e.brokers, ","), "--group", group, "--state-dir", state}
	if out, code := runBin(t, bin, base...); code != 1 || !strings.Contains(out, "--yes") {
		t.Fatalf("reset-state without --yes: exit %d\n%s", code, out)
	}
	if out, code := runBin(t, bin, append(base, "--yes")...); code != 0 {
		t.Fatalf("reset-state --yes: exit %d\n%s", code, out)
	}
	if out, code := runBin(t, bin, append(reset, "--to", "earliest")...); code != 0 {
		t.Fatalf("reset-offsets after reset-state: exit %d\n%s", code, out)
	}
	p = startProc(t, bin, args...)
	e.waitProcessed(group)
	p.term()
	ids := eventIDs(t, e.read(e.output))
	for _, r := range in {
		id := eventIDs(t, []kafkatest.Record{r})
		for k := range id {
			if ids[k] != 2 {
				t.Errorf("%s output %d times after a replay from scratch, want 2", k, ids[k])
			}
		}
	}
}

func getJSON(t *testing.T, url string, wantStatus int, v any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != wantStatus {
		t.Fatalf("GET %s: %s, want %d", url, resp.Status, wantStatus)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
