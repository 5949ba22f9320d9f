package integration

import (
	"bufio"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dedupkit/dedup/internal/kafkatest"
)

// proc is a worker binary running as a child process.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	logs   *syncBuffer
	addr   chan string
	base   string // http://host:port once started
	exited chan error
}

// startProc starts `processor run args...` with --http-addr on a free port
// and waits until its HTTP server listens.
func startProc(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	args = append([]string{"run", "--http-addr", "127.0.0.1:0"}, args...)
	p := &proc{t: t, cmd: exec.Command(bin, args...), logs: &syncBuffer{}, addr: make(chan string, 1), exited: make(chan error, 1)}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.logs.WriteString(line + "\n")
			if m := listenRE.FindStringSubmatch(line); m != nil {
				p.addr <- m[1]
			}
		}
		p.exited <- p.cmd.Wait()
	}()
	t.Cleanup(func() { p.kill() })
	select {
	case a := <-p.addr:
		p.base = "http://" + a
	case err := <-p.exited:
		p.exited <- err
		t.Fatalf("worker exited at start: %v\n%s", err, p.logs.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("worker did not start its HTTP server\n%s", p.logs.String())
	}
	return p
}

// kill sends SIGKILL (a no-op once the process is gone) and reaps it.
func (p *proc) kill() {
	if p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGCONT)
	p.cmd.Process.Kill()
	<-p.exited
	p.exited <- nil
}

// term sends SIGTERM and requires a clean exit.
func (p *proc) term() {
	p.t.Helper()
	p.stopWith(syscall.SIGTERM)
}

// stopWith sends sig and requires a clean exit.
func (p *proc) stopWith(sig syscall.Signal) {
	p.t.Helper()
	p.cmd.Process.Signal(sig)
	select {
	case err := <-p.exited:
		p.exited <- err
		if err != nil {
			p.t.Fatalf("worker exit after %v: %v\n%s", sig, err, p.logs.String())
		}
	case <-time.After(60 * time.Second):
		p.t.Fatalf("worker did not stop after %v\n%s", sig, p.logs.String())
	}
}

// metric returns the sum of the samples of a metric family on /metrics.
func (p *proc) metric(name string) float64 {
	p.t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? ([0-9.e+-]+)$`)
	sum := 0.0
	for _, m := range re.FindAllStringSubmatch(get(p.t, p.base+"/metrics"), -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			p.t.Fatalf("metric %s: %v", name, err)
		}
		sum += v
	}
	return sum
}

// waitMetric waits until cond(value of name) holds.
func (p *proc) waitMetric(name string, timeout time.Duration, cond func(float64) bool) float64 {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		v := p.metric(name)
		if cond(v) {
			return v
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s = %v did not reach the expected value within %v\n%s", name, v, timeout, tail(p.logs.String(), 40))
		}
		time.Sleep(100 * time.Millisecond) // polling a condition on another process
	}
}

func tail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

func workerArgs(e *env, group, state string, extra ...string) []string {
	return append([]string{"--brokers", strings.Join(e.brokers, ","), "--group", group,
		"--input", e.input, "--output", e.output, "--state-dir", state}, extra...)
}

// stream is a paced event producer with duplicates: 1 in 10 events is
// re-sent at once (a producer retry) and 1 in 10 re-published later with a
// new offset. It returns the distinct events it wrote. Safe to run in a
// goroutine: it reports errors instead of failing the test.
func (e *env) stream(prefix string, n int, pace time.Duration) ([]kafkatest.Record, error) {
	var distinct, later []kafkatest.Record
	const batch = 50
	for i := 0; i < n; i += batch {
		var recs []kafkatest.Record
		for j := i; j < min(i+batch, n); j++ {
			ev := event(fmt.Sprintf("%s-%d", prefix, j), fmt.Sprintf("agg-%d", j%37))
			distinct = append(distinct, ev)
			recs = append(recs, ev)
			switch j % 10 {
			case 3:
				recs = append(recs, ev)
			case 7:
				later = append(later, ev)
			}
		}
		if len(later) > 0 && i%(4*batch) == 0 {
			recs, later = append(recs, later...), nil
		}
		if _, err := kafkatest.Produce(e.brokers, e.input, recs); err != nil {
			return distinct, err
		}
		time.Sleep(pace) // pacing the load, not synchronization
	}
	_, err := kafkatest.Produce(e.brokers, e.input, later)
	return distinct, err
}

// streamed is the outcome of a background stream.
type streamed struct {
	recs []kafkatest.Record
	err  error
}

// streamInBackground runs e.stream in a goroutine; receive from the channel
// to wait for it.
func (e *env) streamInBackground(prefix string, n int, pace time.Duration) <-chan streamed {
	done := make(chan streamed, 1)
	go func() {
		recs, err := e.stream(prefix, n, pace)
		done <- streamed{recs, err}
	}()
	return done
}
