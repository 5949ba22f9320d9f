// Package kafka_test checks kafka.sh itself: `make test`, CI and the chaos
// driver all start their brokers with it, so a wrong verdict of its own
// fails a whole run before any test of ours has started.
package kafka_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dedupkit/dedup/internal/kafkatest"
)

// script runs kafka.sh with its own data dir and ports, so it never touches
// the broker `make test` started.
type script struct {
	t    *testing.T
	path string
	env  []string
	port int // node 1's broker port
}

func newScript(t *testing.T) *script {
	t.Helper()
	if os.Getenv("KAFKA_BROKERS") == "" {
		kafkatest.Missing(t, "KAFKA_BROKERS is not set: integration tier only (it starts a second local broker)")
	}
	if _, err := exec.LookPath("java"); err != nil {
		kafkatest.Missing(t, "java not on PATH: kafka.sh cannot start a broker here")
	}
	port := freePorts(t)
	s := &script{t: t, path: "./kafka.sh", port: port, env: append(os.Environ(),
		"KAFKA_DATA="+t.TempDir(), "KAFKA_PORT="+strconv.Itoa(port), "KAFKA_NODES=1")}
	t.Cleanup(func() {
		if out, err := s.cmd(context.Background(), "clean").CombinedOutput(); err != nil {
			t.Errorf("kafka.sh clean: %v\n%s", err, out)
		}
	})
	return s
}

// cmd runs in its own process group, and a cancelled context kills that group:
// a hung kafka.sh must not leave children behind.
func (s *script) cmd(ctx context.Context, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, s.path, args...)
	c.Env = s.env
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	c.WaitDelay = 5 * time.Second
	return c
}

func (s *script) run(args ...string) string {
	s.t.Helper()
	out, err := s.cmd(context.Background(), args...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("kafka.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (s *script) data() string {
	for _, kv := range s.env {
		if v, ok := strings.CutPrefix(kv, "KAFKA_DATA="); ok {
			return v
		}
	}
	panic("no KAFKA_DATA")
}

// freePorts finds a port p such that p (broker), p+100 (controller), p+200
// (the PROXIED listener), p+300 (its advertised proxy port) and p+400 (the
// SECURE listener), the ports kafka.sh derives for node 1, are free now and below the kernel's
// ephemeral range, which kafka.sh refuses.
func freePorts(t *testing.T) int {
	t.Helper()
	for range 200 {
		p := 20000 + rand.IntN(11800) // 20000-31799 with p+400: below 32768
		free := true
		for _, q := range []int{p, p + 100, p + 200, p + 300, p + 400} {
			c, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(q))
			if err != nil {
				free = false
				break
			}
			c.Close()
		}
		if free {
			return p
		}
	}
	t.Fatal("no free ports p, p+100, p+200, p+300, p+400 in 20000-31799 after 200 tries")
	return 0
}

// A port in the ephemeral range is refused at once, with the reason, before
// any download or JVM: a node could not bind it whenever an outgoing
// connection had taken it.
func TestUpRefusesPortsInTheEphemeralRange(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		kafkatest.Missing(t, "no /proc/sys/net/ipv4/ip_local_port_range")
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil || hi-lo < 1000 {
		kafkatest.Missing(t, "ephemeral range %q: too small to test", b)
	}
	for _, tc := range []struct {
		name string
		port int
	}{
		{"broker port inside", lo + 500},
		{"only the advertised proxy and secure ports inside", lo - 299}, // node 1's port+300 is lo+1
		{"only the secure port inside", lo - 399},                       // node 1's port+400 is lo+1
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := t.TempDir()
			env := append(os.Environ(), "KAFKA_DATA="+data, "KAFKA_PORT="+strconv.Itoa(tc.port), "KAFKA_NODES=1",
				"KAFKA_CACHE="+t.TempDir()) // an empty cache: a download would show as a slow failure
			c := exec.Command("./kafka.sh", "up")
			c.Env = env
			out, err := c.CombinedOutput()
			if err == nil {
				clean := exec.Command("./kafka.sh", "clean")
				clean.Env = env
				clean.Run()
				t.Fatalf("kafka.sh up on port %d succeeded:\n%s", tc.port, out)
			}
			if !strings.Contains(string(out), "ephemeral port range") {
				t.Fatalf("kafka.sh up on port %d failed without naming the ephemeral range:\n%s", tc.port, out)
			}
		})
	}
}

// A broker whose child process has not yet exec'd java is starting, not dead.
// Judging liveness by the pid's cmdline, which until the exec is the script's
// own, failed a CI run in 4 s with "node 1 exited during startup" while the JVM
// was fine. A FIFO as stdout.log holds the child in
// that window (opening it for writing blocks until a reader comes), for several
// of kafka.sh's half-second polls.
func TestUpWaitsForABrokerThatHasNotExecdYet(t *testing.T) {
	s := newScript(t)
	s.run("up") // formats the node once
	s.run("down")

	node := filepath.Join(s.data(), "node-1")
	stdoutLog := filepath.Join(node, "stdout.log")
	if err := os.Remove(stdoutLog); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(stdoutLog, 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	up := s.cmd(ctx, "up")
	up.Stdout, up.Stderr = &out, &out
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- up.Wait() }()

	// The child is blocked in open(stdout.log) once its pid is on file. Hold it
	// there for 2 s (four polls); a kafka.sh that calls it dead ends or hangs
	// in that time instead of waiting.
	pidFile := filepath.Join(node, "kafka.pid")
	waitFor(t, 30*time.Second, func() bool { _, err := os.Stat(pidFile); return err == nil })
	select {
	case err := <-done:
		t.Fatalf("kafka.sh up ended while the broker was still starting (%v):\n%s", err, out.String())
	case <-time.After(2 * time.Second):
	}

	// Release the child: read the FIFO until the JVM closes it at `clean`.
	fifo, err := os.Open(stdoutLog)
	if err != nil {
		t.Fatal(err)
	}
	drained := make(chan struct{})
	go func() { defer close(drained); _, _ = io.Copy(io.Discard, fifo) }()
	t.Cleanup(func() { // before the clean newScript registered: stop the JVM so the read ends
		_ = s.cmd(context.Background(), "down").Run()
		<-drained
		fifo.Close()
	})

	if err := <-done; err != nil {
		t.Fatalf("kafka.sh up: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "ready: ") {
		t.Fatalf("kafka.sh up did not report ready:\n%s", out.String())
	}
	if st := s.run("status"); !strings.Contains(st, " alive") {
		t.Fatalf("status after up: %s", st)
	}
}

func waitFor(t *testing.T, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// `kafka.sh kill N` returns once node N's ports are free, so that `start N`
// right after it binds them. A SIGKILLed JVM's main thread shows as a zombie
// before its other threads have closed its sockets; a kill that returns in
// that window fails a broker restart with "port 19092 is taken" when the start
// comes 0.1 s after the kill (seen in make chaos). A kill that does not wait
// left the port listening after 3 kills of 3 here.
func TestKillReturnsOnceThePortsAreFree(t *testing.T) {
	s := newScript(t)
	s.run("up")
	for i := range 2 {
		s.run("kill", "1")
		for _, p := range []int{s.port, s.port + 100, s.port + 200} {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)) // SO_REUSEADDR: a TIME_WAIT does not count
			if err != nil {
				t.Fatalf("kill %d: port %d still taken after kafka.sh kill returned: %v", i+1, p, err)
			}
			l.Close()
		}
		s.run("start", "1")
	}
}
