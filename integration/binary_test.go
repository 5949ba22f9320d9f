package integration

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// buildProcessor compiles cmd/processor once per test binary run.
func buildProcessor(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "processor")
	cmd := exec.Command("go", "build", "-o", bin, "../cmd/processor")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

var listenRE = regexp.MustCompile(`msg="http listening" addr=(\S+)`)

var buildInfoRE = regexp.MustCompile(`(?m)^dedup_build_info\{commit="[^"]+",goversion="go[^"]+",version="[^"]+"\} 1$`)

func TestWorkerBinaryEndToEnd(t *testing.T) {
	e := newEnv(t, 3)
	bin := buildProcessor(t)
	group := e.group("bin")

	cmd := exec.Command(bin, "run",
		"--brokers", strings.Join(e.brokers, ","), "--group", group,
		"--input", e.input, "--output", e.output,
		"--state-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--commit-interval", "50ms")
	cmd.Env = append(os.Environ(), "PROCESSOR_KEY_TYPE=event-id")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	var logs syncBuffer
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			logs.WriteString(line + "\n")
			if m := listenRE.FindStringSubmatch(line); m != nil {
				addr <- m[1]
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
		}
	})

	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case err := <-exited:
		t.Fatalf("worker exited at start: %v\n%s", err, logs.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("worker did not start its HTTP server\n%s", logs.String())
	}

	e.produce(event("e1", "a"), event("e1", "a"), event("e2", "b"), event("e2", "b"), event("e3", "c"))
	e.waitProcessed(group)

	if ids := eventIDs(t, e.read(e.output)); len(ids) != 3 || ids["e1"] != 1 || ids["e2"] != 1 || ids["e3"] != 1 {
		t.Fatalf("outputs %v, want e1, e2, e3 once each", ids)
	}
	metrics := get(t, base+"/metrics")
	for _, want := range []string{
		fmt.Sprintf(`dedup_events_processed_total{group=%q} 3`, group),
		fmt.Sprintf(`dedup_duplicates_skipped_total{group=%q} 2`, group),
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if !buildInfoRE.MatchString(metrics) {
		t.Errorf("/metrics lacks dedup_build_info with its version, commit and goversion")
	}
	if body := get(t, base+"/readyz"); !strings.Contains(body, `"ready":true`) {
		t.Errorf("/readyz: %q", body)
	}
	if body := get(t, base+"/healthz"); !strings.Contains(body, `"live":true`) {
		t.Errorf("/healthz: %q", body)
	}

	// SIGTERM: a clean shutdown with exit status 0.
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("worker exit after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("worker did not stop after SIGTERM\n%s", logs.String())
	}
}

func TestWorkerBinaryRejectsBadFlags(t *testing.T) {
	bin := buildProcessor(t)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"run", "--group", "g", "--input", "i", "--output", "o"}, "--brokers: required"},
		{[]string{"run", "--brokers", "h:1", "--group", "g", "--input", "i", "--output", "o", "--key-type", "offset"}, `--key-type: "offset" is not`},
		{[]string{"run", "--brokers", "h:1", "--group", "g", "--input", "i", "--output", "i"}, "--input:"},
		{[]string{"run", "--brokers", "h:1", "--group", "g", "--input", "i", "--output", "o", "--retention", "-1h"}, "--retention:"},
		{[]string{"run", "--brokers", "h:1", "--group", "g", "--input", "i", "--output", "o", "--guarantee", "at-most-once"},
			`--guarantee: "at-most-once" is not exactly-once or best-effort`},
	}
	for _, tt := range tests {
		out, err := exec.Command(bin, tt.args...).CombinedOutput()
		if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != 1 {
			t.Errorf("%v: exit %v, want status 1", tt.args, err)
		}
		if !strings.Contains(string(out), tt.want) {
			t.Errorf("%v: output %q does not say %q", tt.args, out, tt.want)
		}
	}
}

// syncBuffer is a log buffer the reader goroutine (or a worker's logger)
// writes while the test may read it for a failure message.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) WriteString(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.WriteString(s)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func get(t *testing.T, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %s", url, resp.Status, body)
	}
	return string(body)
}

// A started worker says in its log what its mode guarantees, before it
// serves: exactly-once what the transaction covers and what it does not,
// best-effort that it can lose or duplicate events.
func TestWorkerBinaryStatesItsGuarantee(t *testing.T) {
	e := newEnv(t, 3)
	bin := buildProcessor(t)
	tests := []struct {
		guarantee string
		want      string
	}{
		{"exactly-once", `level=INFO msg="delivery guarantee" guarantee=exactly-once means="exactly-once: an event's Kafka outputs ` +
			`and dead letters, its seen mark and its input offset commit together in one Kafka transaction (consumers must read ` +
			`read_committed); side effects outside Kafka (HTTP calls, databases) are not covered and can repeat"`},
		{"best-effort", `level=WARN msg="delivery guarantee" guarantee=best-effort means="best-effort (goka's runtime): ` +
			`a crash or kill can lose or duplicate events; use exactly-once for a guarantee"`},
	}
	for _, tt := range tests {
		t.Run(tt.guarantee, func(t *testing.T) {
			p := startProc(t, bin, workerArgs(e, e.group("states-"+tt.guarantee), t.TempDir(), "--guarantee", tt.guarantee)...)
			// Logged before the HTTP server, which startProc waited for.
			if logs := p.logs.String(); !strings.Contains(logs, tt.want) {
				t.Errorf("the worker's log lacks\n%s\n%s", tt.want, logs)
			}
			p.term()
		})
	}
}
