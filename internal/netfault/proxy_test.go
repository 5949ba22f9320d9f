package netfault

import (
	"bufio"
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// echoServer answers every line with the same line and remembers what it
// received, so a test can tell held bytes from delivered ones.
type echoServer struct {
	l     net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	got   []string
	conns []net.Conn
}

func newEchoServer(t *testing.T) *echoServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{l: l}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					s.mu.Lock()
					s.got = append(s.got, strings.TrimSpace(line))
					s.mu.Unlock()
					c.Write([]byte(line))
				}
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *echoServer) received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

func startProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := Start([]Route{{Listen: "127.0.0.1:0", Target: target}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

type client struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t: t, c: c, r: bufio.NewReader(c)}
}

func (c *client) send(line string) {
	c.t.Helper()
	if _, err := c.c.Write([]byte(line + "\n")); err != nil {
		c.t.Fatal(err)
	}
}

// reply waits up to d for a line.
func (c *client) reply(d time.Duration) (string, error) {
	c.c.SetReadDeadline(time.Now().Add(d))
	line, err := c.r.ReadString('\n')
	return strings.TrimSpace(line), err
}

func (c *client) mustReply(want string) {
	c.t.Helper()
	got, err := c.reply(10 * time.Second)
	if err != nil || got != want {
		c.t.Fatalf("reply %q, %v; want %q", got, err, want)
	}
}

// held is how long a test watches for bytes that must not arrive. Absence
// cannot be awaited; a delivered byte would arrive in microseconds here.
const held = 300 * time.Millisecond

func (c *client) mustGetNothing() {
	c.t.Helper()
	got, err := c.reply(held)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		c.t.Fatalf("got %q, %v while the network is cut; want nothing", got, err)
	}
}

// forwarding dials through p and checks that line comes back: the
// connection works before a test cuts it.
func forwarding(t *testing.T, p *Proxy, line string) *client {
	t.Helper()
	c := dial(t, p.Addrs())
	c.send(line)
	c.mustReply(line)
	return c
}

func TestProxyForwards(t *testing.T) {
	s := newEchoServer(t)
	forwarding(t, startProxy(t, s.l.Addr().String()), "ping")
}

// A blackhole holds what either side sends, on open and on new
// connections, and delivers it at Heal.
func TestBlackholeHoldsTrafficUntilHeal(t *testing.T) {
	s := newEchoServer(t)
	p := startProxy(t, s.l.Addr().String())
	old := forwarding(t, p, "before")

	p.Blackhole()
	old.send("during")
	fresh := dial(t, p.Addrs()) // accepted, not forwarded
	fresh.send("new")
	old.mustGetNothing()
	fresh.mustGetNothing()
	if got := s.received(); len(got) != 1 {
		t.Fatalf("the server received %q during the blackhole; want only the line before it", got)
	}

	p.Heal()
	old.mustReply("during")
	fresh.mustReply("new")
}

// A client that closes a held connection, open before the cut or opened
// during it, counts as having given up; what it sent is still delivered at
// Heal, as TCP delivers what was sent before a close. Connections the proxy
// closes itself do not count.
func TestBlackholeCountsClientsThatGiveUp(t *testing.T) {
	s := newEchoServer(t)
	p := startProxy(t, s.l.Addr().String())
	old := forwarding(t, p, "before")
	idle := forwarding(t, p, "idle")

	p.Blackhole()
	old.send("old gave up")
	fresh := dial(t, p.Addrs())
	fresh.send("fresh gave up")
	old.c.Close()
	fresh.c.Close()
	waitFor(t, "two give-ups", func() bool { return p.GaveUp() == 2 })

	p.Heal()
	waitFor(t, "the held lines delivered", func() bool { return len(s.received()) == 4 })
	got := s.received()
	slices.Sort(got)
	if want := []string{"before", "fresh gave up", "idle", "old gave up"}; !slices.Equal(got, want) {
		t.Fatalf("server received %q; want %q", got, want)
	}
	idle.send("still open") // only the closed connections count
	idle.mustReply("still open")

	p.Reset()
	p.Heal()
	if n := p.GaveUp(); n != 2 {
		t.Fatalf("GaveUp = %d after a Reset closed the idle connection; want 2", n)
	}
}

// waitFor polls cond, another goroutine's state, for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A reset closes open connections and refuses new ones until Heal.
func TestResetClosesAndRefusesUntilHeal(t *testing.T) {
	s := newEchoServer(t)
	p := startProxy(t, s.l.Addr().String())
	old := forwarding(t, p, "before")

	p.Reset()
	if got, err := old.reply(10 * time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("open connection after Reset: %q, %v; want it closed", got, err)
	}
	refused := dial(t, p.Addrs()) // the listener accepts, then closes
	refused.send("lost")
	if got, err := refused.reply(10 * time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("new connection during Reset: %q, %v; want it closed", got, err)
	}

	p.Heal()
	c := dial(t, p.Addrs())
	c.send("after")
	c.mustReply("after")
	if got := s.received(); strings.Join(got, ",") != "before,after" {
		t.Fatalf("server received %q; want before,after", got)
	}
}

// Close ends held connections too: no goroutine waits for a Heal that
// never comes.
func TestCloseEndsHeldConnections(t *testing.T) {
	s := newEchoServer(t)
	p := startProxy(t, s.l.Addr().String())
	c := forwarding(t, p, "x")
	p.Blackhole()
	c.send("held")
	dial(t, p.Addrs()).send("held too")
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return while connections were held")
	}
}

func TestParseRoutes(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []Route
		wantErr bool
	}{
		{in: "127.0.0.1:9392=127.0.0.1:9292", want: []Route{{"127.0.0.1:9392", "127.0.0.1:9292"}}},
		{in: "a:1=b:2, c:3=d:4", want: []Route{{"a:1", "b:2"}, {"c:3", "d:4"}}},
		{in: "", wantErr: true},
		{in: "a:1", wantErr: true},
		{in: "a:1=", wantErr: true},
		{in: "=b:2", wantErr: true},
	} {
		got, err := ParseRoutes(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("ParseRoutes(%q) error %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if !tc.wantErr && len(got) != len(tc.want) {
			t.Errorf("ParseRoutes(%q) = %v, want %v", tc.in, got, tc.want)
			continue
		}
		for i := range tc.want {
			if got[i] != tc.want[i] {
				t.Errorf("ParseRoutes(%q) = %v, want %v", tc.in, got, tc.want)
			}
		}
	}
}
