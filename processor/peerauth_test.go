package processor

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// tcpPair is both ends of a loopback TCP connection: the handshake runs on
// what a listener accepts and what a dialer connects.
func tcpPair(t *testing.T) (accepted, dialled net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialled, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if accepted, err = ln.Accept(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { accepted.Close(); dialled.Close() })
	return accepted, dialled
}

var (
	listenerID = peerIdentity{group: "grp", host: "grp-a", incarnation: "inc-a"}
	dialerID   = peerIdentity{group: "grp", host: "grp-b"}
)

// Two instances of the group with the same secret learn each other's names.
func TestPeerHandshake(t *testing.T) {
	a, d := tcpPair(t)
	got := make(chan peerIdentity, 1)
	go func() {
		p, err := listenerHandshake(a, testSecret, listenerID)
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	p, err := dialerHandshake(d, testSecret, dialerID)
	if err != nil {
		t.Fatal(err)
	}
	if p != listenerID {
		t.Errorf("dialer learnt %+v, want %+v", p, listenerID)
	}
	if p := <-got; p != (peerIdentity{group: "grp", host: "grp-b"}) {
		t.Errorf("listener learnt %+v, want grp-b", p)
	}
}

// A listener facing whatever a stranger sends: it fails the handshake,
// within peerHandshakeTimeout, and the stranger reads nothing that names
// the group or an instance.
func TestPeerHandshakeRefusesStrangersAtTheListener(t *testing.T) {
	wrong := []byte("another secret, 32 bytes or more")
	for _, tc := range []struct {
		name string
		// stranger acts on the dialled end; what the listener sends is read
		// by the test.
		stranger func(c net.Conn)
		auth     bool // the failure is errPeerAuth (else an I/O error)
	}{
		{"wrong secret", func(c net.Conn) { dialerHandshake(c, wrong, dialerID) }, true},
		{"same secret, another group", func(c net.Conn) {
			dialerHandshake(c, testSecret, peerIdentity{group: "other", host: "other-x"})
		}, true},
		{"reflection: the listener's own nonce sent back", func(c net.Conn) {
			hello, _ := bufio.NewReader(c).ReadString('\n')
			f := strings.Fields(hello)
			fmt.Fprintf(c, "%s %s %x\n", peerProto, f[1], peerProof(wrong, proofByDialer, nil, nil))
		}, true},
		{"an old client's line", func(c net.Conn) { io.WriteString(c, "dedup-peer/1 grp-x 1\n") }, true},
		{"malformed proof", func(c net.Conn) { fmt.Fprintf(c, "%s %x zz\n", peerProto, nonce()) }, true},
		{"truncated", func(c net.Conn) { fmt.Fprintf(c, "%s %x", peerProto, nonce()); closeWrite(c) }, false},
		{"oversize line", func(c net.Conn) { c.Write(bytes.Repeat([]byte("a"), 4*maxPeerLine)) }, true},
		{"silent until the timeout", func(net.Conn) {}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, d := tcpPair(t)
			read := make(chan []byte, 1)
			go func() {
				var got bytes.Buffer
				d.SetReadDeadline(time.Now().Add(2 * peerHandshakeTimeout))
				tc.stranger(teeConn{Conn: d, w: &got})
				io.Copy(&got, d) // until the listener drops the connection
				read <- got.Bytes()
			}()
			start := time.Now()
			_, err := listenerHandshake(a, testSecret, listenerID)
			took := time.Since(start)
			a.Close()
			if err == nil {
				t.Fatal("a stranger passed the handshake")
			}
			if errors.Is(err, errPeerAuth) != tc.auth {
				t.Errorf("err %v: errPeerAuth %v, want %v", err, errors.Is(err, errPeerAuth), tc.auth)
			}
			if took > peerHandshakeTimeout+time.Second {
				t.Errorf("the handshake took %v, longer than its timeout %v", took, peerHandshakeTimeout)
			}
			got := <-read
			for _, name := range []string{listenerID.group, listenerID.host, listenerID.incarnation} {
				if bytes.Contains(got, []byte(name)) {
					t.Errorf("the stranger read %q, which names %q", got, name)
				}
			}
		})
	}
}

// closeWrite ends what c sends, as a peer that stops mid-line.
func closeWrite(c net.Conn) { c.(teeConn).Conn.(*net.TCPConn).CloseWrite() }

// teeConn copies what is read from the connection to w.
type teeConn struct {
	net.Conn
	w io.Writer
}

func (c teeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.w.Write(p[:n])
	return n, err
}

// A dialer facing a listener that is not an instance of its group with the
// secret fails, and says nothing that names it.
func TestPeerHandshakeRefusesStrangersAtTheDialer(t *testing.T) {
	wrong := []byte("another secret, 32 bytes or more")
	for _, tc := range []struct {
		name     string
		stranger func(c net.Conn)
		// insider: the stranger proved the secret, so it may learn the
		// dialer's name; it still fails the dialer's check of the group.
		insider bool
	}{
		{"wrong secret", func(c net.Conn) { listenerHandshake(c, wrong, listenerID); closeWrite(c) }, false},
		{"same secret, another group", func(c net.Conn) {
			listenerHandshake(c, testSecret, peerIdentity{group: "other", host: "other-x", incarnation: "1"})
		}, true},
		{"reflection: the dialer's own proof sent back", func(c net.Conn) {
			fmt.Fprintf(c, "%s %x\n", peerProto, nonce())
			line, _ := bufio.NewReader(c).ReadString('\n')
			if f := strings.Fields(line); len(f) == 3 {
				fmt.Fprintf(c, "%s\n", f[2])
			}
		}, false},
		{"an old listener's hello", func(c net.Conn) { io.WriteString(c, "dedup-peer/1 grp-a 1\n") }, false},
		{"oversize line", func(c net.Conn) { c.Write(bytes.Repeat([]byte("a"), 4*maxPeerLine)) }, false},
		{"truncated", func(c net.Conn) { fmt.Fprintf(c, "%s %x", peerProto, nonce()); closeWrite(c) }, false},
		{"silent until the timeout", func(net.Conn) {}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, d := tcpPair(t)
			read := make(chan []byte, 1)
			go func() {
				var got bytes.Buffer
				a.SetReadDeadline(time.Now().Add(2 * peerHandshakeTimeout))
				tc.stranger(teeConn{Conn: a, w: &got})
				io.Copy(&got, a)
				read <- got.Bytes()
			}()
			start := time.Now()
			p, err := dialerHandshake(d, testSecret, dialerID)
			took := time.Since(start)
			d.Close()
			if err == nil {
				t.Fatalf("a stranger passed the handshake as %+v", p)
			}
			if took > peerHandshakeTimeout+time.Second {
				t.Errorf("the handshake took %v, longer than its timeout %v", took, peerHandshakeTimeout)
			}
			if got := <-read; !tc.insider && bytes.Contains(got, []byte(dialerID.host)) {
				t.Errorf("the stranger read %q, which names %q", got, dialerID.host)
			}
		})
	}
}

// A timed-out handshake is a timeout, not an authentication failure.
func TestPeerHandshakeTimeoutIsATimeout(t *testing.T) {
	a, _ := tcpPair(t)
	_, err := listenerHandshake(a, testSecret, listenerID)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("err %v, want a deadline exceeded", err)
	}
}
