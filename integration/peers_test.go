package integration

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// peerSecretFile writes a peer secret for a group's instances to share.
func peerSecretFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "peer-secret")
	if err := os.WriteFile(p, []byte("integration-test-peer-secret-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// peerPort is a TCP port free on each of the loopback addresses: the
// instances of a group listen on one port, each on its own address, as they
// would on hosts of their own (an instance dials no other port). Linux
// routes all of 127.0.0.0/8 to the loopback; a machine where it does not
// fails the test rather than skip it.
func peerPort(t *testing.T, ips ...string) int {
	t.Helper()
	for try := 0; try < 20; try++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		free := true
		for _, ip := range ips {
			l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
			if err != nil {
				free = false
				break
			}
			l.Close()
		}
		if free {
			return port
		}
	}
	t.Fatalf("no port free on all of %v (each needs to be a loopback address)", ips)
	return 0
}

func hostPort(ip string, port int) string { return net.JoinHostPort(ip, strconv.Itoa(port)) }

// An instance killed with its transaction open holds the loop partitions
// of the live instances until someone aborts that transaction. Its peers
// hold a liveness connection to it (--peer-addr, with the group's secret):
// the connection ends with the process, its address then refuses, and the
// survivor aborts what the dead one left open at once. Here the stuck watch
// is off (--fence-stuck-after at the transaction timeout), so the death can
// only have been told by the liveness connection; the events streamed
// across the kill must still come out exactly once.
func TestPeersNoticeAKilledInstance(t *testing.T) {
	e := newEnv(t, 6)
	bin := buildProcessor(t)
	group := e.group("eos-peers")
	secret := peerSecretFile(t)
	port := peerPort(t, "127.0.0.1", "127.0.0.2")
	args := func(id, ip string) []string {
		return workerArgs(e, group, t.TempDir(), "--instance-id", id, "--session-timeout", "6s",
			"--fence-stuck-after", "10s", "--peer-addr", hostPort(ip, port), "--peer-secret-file", secret)
	}
	a := startProc(t, bin, args("a", "127.0.0.1")...)
	b := startProc(t, bin, args("b", "127.0.0.2")...)
	for _, p := range []*proc{a, b} {
		p.waitMetric("dedup_peers_watched", 60*time.Second, func(v float64) bool { return v == 1 })
	}

	done := e.streamInBackground("peer", 3000, 100*time.Millisecond)
	b.waitMetric("dedup_events_processed_total", 60*time.Second, func(v float64) bool { return v > 0 })
	b.kill()
	a.waitMetric("dedup_peer_deaths_total", 30*time.Second, func(v float64) bool { return v >= 1 })
	fenced := a.metric("dedup_peer_transactions_fenced_total")

	s := <-done
	if s.err != nil {
		t.Fatal(s.err)
	}
	e.waitProcessed(group)
	ids := eventIDs(t, e.read(e.output))
	for id := range eventIDs(t, s.recs) {
		if ids[id] != 1 {
			t.Errorf("event %s in the output %d times, want 1", id, ids[id])
		}
	}
	if len(ids) != len(eventIDs(t, s.recs)) {
		t.Errorf("%d distinct events in the output, %d streamed", len(ids), len(eventIDs(t, s.recs)))
	}
	if got := a.metric("dedup_peer_deaths_total"); got != 1 {
		t.Errorf("the survivor counted %v deaths, want the one kill", got)
	}
	t.Logf("the survivor saw the kill through the liveness connection and aborted %v open transactions of the dead instance", fenced)
	a.term()
}

// stranger listens at addr and, to every connection, says what an instance
// of the group said before the handshake existed (its name and an
// incarnation), then hangs up; closing it makes the address refuse.
type stranger struct {
	ln       net.Listener
	accepted chan struct{}
	done     chan struct{}
}

func listenStranger(t *testing.T, addr, hello string) *stranger {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &stranger{ln: ln, accepted: make(chan struct{}, 100), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, hello)
			c.Close()
			s.accepted <- struct{}{}
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *stranger) close() { s.ln.Close(); <-s.done }

// A member's advertised address answered by a stranger that then refuses
// (as a dead instance's would) is no death: the stranger never proved the
// secret, so the instance that dialled it aborts nobody's transactions.
// Before the handshake, this very sequence made the dialler fence the
// member's open transactions.
func TestStrangerThatAnswersAndRefusesAbortsNothing(t *testing.T) {
	e := newEnv(t, 6)
	bin := buildProcessor(t)
	group := e.group("eos-peer-stranger")
	secret := peerSecretFile(t)
	port := peerPort(t, "127.0.0.1", "127.0.0.2", "127.0.0.3")
	// b listens on .3 but advertises .2, where the stranger answers as b.
	st := listenStranger(t, hostPort("127.0.0.2", port), fmt.Sprintf("dedup-peer/1 %s-b 0123456789abcdef\n", group))
	common := func(id string, extra ...string) []string {
		return workerArgs(e, group, t.TempDir(), append([]string{"--instance-id", id, "--session-timeout", "6s",
			"--fence-stuck-after", "10s", "--peer-secret-file", secret}, extra...)...)
	}
	a := startProc(t, bin, common("a", "--peer-addr", hostPort("127.0.0.1", port))...)
	b := startProc(t, bin, common("b", "--peer-addr", hostPort("127.0.0.3", port), "--peer-advertise", hostPort("127.0.0.2", port))...)
	done := e.streamInBackground("stranger", 600, 50*time.Millisecond)
	select {
	case <-st.accepted:
	case <-time.After(60 * time.Second):
		t.Fatalf("a never dialled b's advertised address\n%s", tail(a.logs.String(), 40))
	}
	st.close() // from now on b's advertised address refuses
	// a's watcher of b ends once the stranger failed the handshake; this
	// line is its last word.
	awaitLog(t, a, regexp.MustCompile(`no liveness connection to an instance of the group.*instance=`+regexp.QuoteMeta(group)+`-b .*did not prove the peer secret`))
	b.waitMetric("dedup_peers_watched", 60*time.Second, func(v float64) bool { return v == 1 }) // b's watch of a is real

	s := <-done
	if s.err != nil {
		t.Fatal(s.err)
	}
	e.waitProcessed(group)
	ids := eventIDs(t, e.read(e.output))
	for id := range eventIDs(t, s.recs) {
		if ids[id] != 1 {
			t.Errorf("event %s in the output %d times, want 1", id, ids[id])
		}
	}
	for _, m := range []string{"dedup_peer_deaths_total", "dedup_peer_transactions_fenced_total"} {
		if v := a.metric(m); v != 0 {
			t.Errorf("%s = %v after a stranger answered and refused, want 0\n%s", m, v, tail(a.logs.String(), 40))
		}
	}
	a.term()
	b.term()
}

// awaitLog waits for a line of p's log that matches re.
func awaitLog(t *testing.T, p *proc, re *regexp.Regexp) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !re.MatchString(p.logs.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line matching %s\n%s", re, tail(p.logs.String(), 40))
		}
		time.Sleep(50 * time.Millisecond) // polling another process's log
	}
}

// A stranger that connects to the liveness listener reads the protocol's
// name and a random nonce, nothing that names the group, the instance or
// its incarnation, and is dropped: at once after a wrong answer, after the
// handshake's timeout when it says nothing.
func TestStrangerAtTheListenerLearnsNothing(t *testing.T) {
	e := newEnv(t, 3)
	bin := buildProcessor(t)
	group := e.group("eos-peer-listener")
	port := peerPort(t, "127.0.0.1")
	a := startProc(t, bin, workerArgs(e, group, t.TempDir(), "--instance-id", "a",
		"--peer-addr", hostPort("127.0.0.1", port), "--peer-secret-file", peerSecretFile(t))...)
	awaitLog(t, a, regexp.MustCompile(`listening for the liveness connections`))
	hello := regexp.MustCompile(`^dedup-peer/2 [0-9a-f]{64}\n$`)
	for _, tc := range []struct {
		name   string
		says   string
		within time.Duration
	}{
		{"silent", "", 5 * time.Second},
		{"an old instance's hello", "dedup-peer/1 x-y 1\n", time.Second},
		{"a wrong proof", "dedup-peer/2 " + strings.Repeat("ab", 32) + " " + strings.Repeat("cd", 32) + "\n", time.Second},
	} {
		c, err := net.Dial("tcp", hostPort("127.0.0.1", port))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		c.SetDeadline(start.Add(10 * time.Second))
		first, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		io.WriteString(c, tc.says)
		rest, err := io.ReadAll(c)
		took := time.Since(start)
		c.Close()
		if err != nil {
			t.Errorf("%s: not dropped: %v", tc.name, err)
		}
		got := append([]byte(first), rest...)
		if !hello.Match(got) {
			t.Errorf("%s: read %q, want only the protocol's hello", tc.name, got)
		}
		for _, name := range []string{group, "-a"} {
			if bytes.Contains(got, []byte(name)) {
				t.Errorf("%s: read %q, which names %q", tc.name, got, name)
			}
		}
		if took > tc.within {
			t.Errorf("%s: dropped after %v, want within %v", tc.name, took.Round(time.Millisecond), tc.within)
		}
	}
	awaitLog(t, a, regexp.MustCompile(`dropped a liveness connection that did not pass the handshake`))
	a.term()
}

// Without a peer secret `processor run` opens no port but HTTP's: the
// liveness listener stays closed, and the worker says once how to open it.
// With one, the liveness port is the only other (the check can tell).
func TestNoPeerSecretNoListener(t *testing.T) {
	e := newEnv(t, 3)
	bin := buildProcessor(t)
	group := e.group("eos-peer-closed")
	for _, tc := range []struct {
		name  string
		extra []string
		peer  bool
	}{
		{"no secret", nil, false},
		{"a secret", []string{"--peer-addr", hostPort("127.0.0.1", peerPort(t, "127.0.0.1")), "--peer-secret-file", peerSecretFile(t)}, true},
	} {
		p := startProc(t, bin, workerArgs(e, group, t.TempDir(), append([]string{"--instance-id", "a"}, tc.extra...)...)...)
		// Ready: Run has started, and opened its listener if it has one.
		p.waitHealth("/readyz", http.StatusOK, time.Minute, nil)
		_, httpPort, _ := net.SplitHostPort(strings.TrimPrefix(p.base, "http://"))
		ports := listeningPorts(t, p.cmd.Process.Pid)
		want := []string{httpPort}
		if tc.peer {
			_, peer, _ := net.SplitHostPort(tc.extra[1])
			want = append(want, peer)
		}
		if fmt.Sprint(sortedKeys(ports)) != fmt.Sprint(sortedStrings(want)) {
			t.Errorf("%s: the worker listens on ports %v, want %v", tc.name, sortedKeys(ports), sortedStrings(want))
		}
		off := strings.Count(p.logs.String(), "liveness connections are off")
		if want := map[bool]int{false: 1, true: 0}[tc.peer]; off != want {
			t.Errorf("%s: told %d times that the liveness connections are off, want %d", tc.name, off, want)
		}
		p.term()
	}
}

// listeningPorts is the TCP ports the process pid listens on: the
// listening sockets of its network namespace (/proc/<pid>/net/tcp, tcp6)
// whose inode is one of the process's open files.
func listeningPorts(t *testing.T, pid int) map[string]bool {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	mine := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			mine[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	ports := map[string]bool{}
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			// sl local_address rem_address st ... inode; st 0A is LISTEN.
			if len(f) < 10 || f[3] != "0A" || !mine[f[9]] {
				continue
			}
			port, err := strconv.ParseUint(f[1][strings.LastIndex(f[1], ":")+1:], 16, 16)
			if err != nil {
				t.Fatal(err)
			}
			ports[strconv.FormatUint(port, 10)] = true
		}
	}
	return ports
}

func sortedKeys(m map[string]bool) []string { return slices.Sorted(maps.Keys(m)) }

func sortedStrings(s []string) []string { return slices.Sorted(slices.Values(s)) }
