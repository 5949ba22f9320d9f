package processor

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// dialStep is one scripted outcome of a peer watcher's dial.
type dialStep struct {
	host, incarnation string // answered as
	err               error
}

func answered(host, incarnation string) dialStep {
	return dialStep{host: host, incarnation: incarnation}
}

var (
	refused  = dialStep{err: &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	reset    = dialStep{err: fmt.Errorf("hello: %w", syscall.ECONNRESET)}
	timedOut = dialStep{err: &net.OpError{Op: "dial", Err: os.ErrDeadlineExceeded}}
	stranger = dialStep{err: fmt.Errorf("%w: a wrong proof", errPeerAuth)}
)

// testSecret is a peer secret of the minimum length.
var testSecret = []byte("0123456789abcdef0123456789abcdef")

// scriptedWatch is a peer watch whose dials follow steps: each connection
// it answers ends at once, as the peer's would when its process exits, and
// dials past the script time out.
func scriptedWatch(steps []dialStep) (w *peerWatch, deaths *[]string, dials *int) {
	a := newAborter("g", "g-me", nil, nil)
	w = newPeerWatch(a, slog.New(slog.DiscardHandler), "g-me", testSecret, "")
	deaths, dials = &[]string{}, new(int)
	w.died = func(host string) { *deaths = append(*deaths, host) }
	w.dial = func(context.Context, string, time.Duration) (net.Conn, peerIdentity, error) {
		step := timedOut
		if *dials < len(steps) {
			step = steps[*dials]
		}
		*dials++
		if step.err != nil {
			return nil, peerIdentity{}, step.err
		}
		mine, theirs := net.Pipe()
		theirs.Close()
		return mine, peerIdentity{group: "g", host: step.host, incarnation: step.incarnation}, nil
	}
	return w, deaths, dials
}

// Only a connection that was answered as the peer's, ended, and whose
// address then refused, is a death; a cut connection, a restart, a slow
// or foreign answer are not.
func TestPeerDeathIsARefusalAfterAConnection(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []dialStep
		dead  bool
		dials int
	}{
		{"ended, then refused", []dialStep{answered("g-a", "1"), refused}, true, 2},
		{"cut, answered again, then refused", []dialStep{answered("g-a", "1"), answered("g-a", "1"), refused}, true, 3},
		{"restarted, then refused", []dialStep{answered("g-a", "1"), answered("g-a", "2"), refused}, true, 3},
		{"a listener on its way out, then refused", []dialStep{answered("g-a", "1"), reset, reset, refused}, true, 4},
		{"ended, then timed out", []dialStep{answered("g-a", "1"), timedOut}, false, 2},
		{"ended, then another instance answers", []dialStep{answered("g-a", "1"), answered("g-b", "7")}, false, 2},
		{"never answered: refused", []dialStep{refused}, false, 1},
		{"answered as another instance", []dialStep{answered("g-b", "1"), refused}, false, 1},
		{"resets until the probe gives up", []dialStep{answered("g-a", "1"), reset, reset, reset, reset, reset, refused}, false, 1 + peerProbeTries},
		{"a stranger that fails the proof, then refused", []dialStep{stranger, refused}, false, 1},
		{"ended, a stranger that fails the proof, then refused", []dialStep{answered("g-a", "1"), stranger, refused}, false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, deaths, dials := scriptedWatch(tc.steps)
			w.watch(context.Background(), "g-a", "10.0.0.1:7000")
			if got := len(*deaths) == 1 && (*deaths)[0] == "g-a"; got != tc.dead || len(*deaths) > 1 {
				t.Errorf("deaths %v, want dead %v", *deaths, tc.dead)
			}
			if *dials != tc.dials {
				t.Errorf("%d dials, want %d", *dials, tc.dials)
			}
		})
	}
}

// The real thing on loopback: a watcher of a live server is not told of a
// death when its connection is cut, and is once the server closes (its
// listener with it, as at a process's exit).
func TestPeerServerClosedIsADeath(t *testing.T) {
	srv, err := listenPeers("127.0.0.1:0", peerIdentity{group: "g", host: "g-a", incarnation: "inc1"}, testSecret, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.close()
	a := newAborter("g", "g-me", nil, nil)
	w := newPeerWatch(a, slog.New(slog.DiscardHandler), "g-me", testSecret, "")
	died := make(chan string, 1)
	w.died = func(host string) { died <- host }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.watch(ctx, "g-a", fmt.Sprintf("127.0.0.1:%d", srv.port()))
	}()
	connected := func(n int) func() bool {
		return func() bool { srv.mu.Lock(); defer srv.mu.Unlock(); return len(srv.conns) == n }
	}
	awaitCond(t, "the watcher to connect", connected(1))
	// Cut the connection, not the listener: the watcher connects again.
	srv.mu.Lock()
	var cut net.Conn
	for c := range srv.conns {
		cut = c
	}
	srv.mu.Unlock()
	cut.Close()
	awaitCond(t, "the watcher to connect again", func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		_, old := srv.conns[cut]
		return len(srv.conns) == 1 && !old
	})
	select {
	case host := <-died:
		t.Fatalf("a cut connection to a live server was taken for the death of %s", host)
	default:
	}
	srv.close()
	select {
	case host := <-died:
		if host != "g-a" {
			t.Fatalf("death of %s, want g-a", host)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server closed and the watcher was not told of a death")
	}
	<-done
}

// awaitCond waits up to 10 s for cond.
func awaitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAdvertisedPeer(t *testing.T) {
	for _, tc := range []struct {
		listen, advertise string
		brokers           []string
		want, err         string
	}{
		{":0", "w1.example:7000", nil, "w1.example:7000", ""},
		{"10.1.2.3:0", "", []string{"127.0.0.1:9092"}, "10.1.2.3:4321", ""},
		{"w1.example:0", "", nil, "w1.example:4321", ""},
		{":0", "", []string{"127.0.0.1:9092"}, "127.0.0.1:4321", ""},
		{"0.0.0.0:0", "", []string{"no-such-host.invalid:9092", "127.0.0.1:9092"}, "127.0.0.1:4321", ""},
		{"[::]:0", "", []string{"no-such-host.invalid:9092"}, "", "no route to any of the brokers"},
	} {
		got, err := advertisedPeer(tc.listen, tc.advertise, 4321, tc.brokers)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("advertisedPeer(%q, %q, %v) = %q, %v; want %q, %q", tc.listen, tc.advertise, tc.brokers, got, err, tc.want, tc.err)
		}
	}
}

// A watch's count of connected peers goes up and down with its watchers
// and reaches the hooks.
func TestPeersWatchedCount(t *testing.T) {
	var mu sync.Mutex
	var seen []int
	a := newAborter("g", "g-me", nil, hookList{&peersHooks{mu: &mu, seen: &seen}})
	w := newPeerWatch(a, slog.New(slog.DiscardHandler), "g-me", testSecret, "")
	w.count(+1)
	w.count(+1)
	w.count(-1)
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(seen) != "[1 2 1]" {
		t.Errorf("peers watched reported %v, want [1 2 1]", seen)
	}
}

type peersHooks struct {
	mu   *sync.Mutex
	seen *[]int
}

func (h *peersHooks) OnPeersWatched(n int) { h.mu.Lock(); *h.seen = append(*h.seen, n); h.mu.Unlock() }

// Only the group's port is dialled; port 0 dials any.
func TestPeerWatchDialsOnlyTheGroupsPort(t *testing.T) {
	for _, tc := range []struct {
		listen, advertise, addr string
		ok                      bool
	}{
		{":7070", "", "10.0.0.2:7070", true},
		{":7070", "", "10.0.0.2:22", false},
		{":7070", "w1:9000", "10.0.0.2:9000", true},
		{":7070", "w1:9000", "10.0.0.2:7070", false},
		{":0", "", "10.0.0.2:45678", true},
		{":7070", "", "no port", false},
	} {
		a := newAborter("g", "g-me", nil, nil)
		w := newPeerWatch(a, slog.New(slog.DiscardHandler), "g-me", testSecret, peerPort(tc.listen, tc.advertise))
		if got := w.dialable(tc.addr); got != tc.ok {
			t.Errorf("listen %q advertise %q: dialable(%q) = %v, want %v", tc.listen, tc.advertise, tc.addr, got, tc.ok)
		}
	}
}
