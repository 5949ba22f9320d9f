package processor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Kafka tells a group of an instance's death only when its session times
// out, and an instance killed with its transaction open holds the loop
// partitions of the live ones until that transaction is aborted
// (stuck.go). The stuck watch cannot tell a dead instance from a slow one,
// so it waits FenceStuckAfter: the others stall that long after every
// kill -9.
//
// A process that dies on a live host (kill -9, a crash, the OOM killer)
// closes its sockets, and its port refuses connections from then on. So,
// given the group's shared secret (Config.Peers.Secret), each instance
// listens on Config.Peers.Addr, advertises the address in its group
// subscription (internal/assign), and holds one connection to every other
// instance of the group it finds there (peerwatch.go), on the group's port
// only (peerPort). Every connection first passes a mutual proof of the
// secret (peerauth.go): what follows can abort an instance's transactions,
// so nobody without the secret may take part. When such an authenticated
// connection ends and a new one to the same address is refused, that
// process is gone: its open transactions are aborted at once
// (peerWatch.dead, through the aborter of abort.go), and the loop
// partitions they held go on within a few round trips. Nothing less certain counts as a death: an address that
// times out (a lost host, a firewall), fails the proof, or answers with
// another incarnation (a restart, whose own InitProducerId aborts the
// transaction) is left to the stuck watch, the group's session timeout and
// the broker. Without a secret no port is opened and nothing is dialled.
//
// An instance that stops cleanly closes its listener only after its members
// committed and left their sessions: the others then find no transaction of
// it open and fence nothing.

// maxPeerConns bounds the liveness connections one instance accepts, in
// their handshake or held: one per other instance of the group is the use.
const maxPeerConns = 1024

// peerAuthLogEvery is how often the listener logs a connection that failed
// its handshake; the others in between are counted in the next line.
const peerAuthLogEvery = 10 * time.Second

// newIncarnation names one run of the process: a restarted instance has
// the same host and a new incarnation.
func newIncarnation() string {
	b := make([]byte, 8)
	rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// peerServer answers the liveness connections of the group's other
// instances: it runs the handshake (peerauth.go), which a connection must
// pass before it learns anything, then holds the connection until the peer
// closes it or the server closes.
type peerServer struct {
	ln     net.Listener
	secret []byte
	me     peerIdentity
	log    *slog.Logger
	failed logLimit // handshakes that failed, logged at most every peerAuthLogEvery

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup // serve and the connections' goroutines
}

// listenPeers listens on addr for the liveness connections of me's group,
// authenticated with secret; serve runs until close.
func listenPeers(addr string, me peerIdentity, secret []byte, log *slog.Logger) (*peerServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("peer address %s: %w", addr, err)
	}
	s := &peerServer{ln: ln, secret: secret, me: me, log: log, failed: logLimit{every: peerAuthLogEvery},
		conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

// port is the port the server listens on.
func (s *peerServer) port() int { return s.ln.Addr().(*net.TCPAddr).Port }

func (s *peerServer) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and the like: wait a little, as net/http does.
			time.Sleep(50 * time.Millisecond)
			continue
		}
		s.mu.Lock()
		if s.closed || len(s.conns) >= maxPeerConns {
			s.mu.Unlock()
			c.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.hold(c)
	}
}

// hold runs the handshake and, once it passed, waits for the peer to close
// the connection. A connection that fails it is dropped and logged.
func (s *peerServer) hold(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	peer, err := listenerHandshake(c, s.secret, s.me)
	if err != nil {
		if ok, suppressed := s.failed.allow(time.Now()); ok {
			s.log.Warn("dropped a liveness connection that did not pass the handshake (a wrong or missing "+
				"--peer-secret-file, another group, or not an instance of this one)",
				"remote", c.RemoteAddr().String(), "err", err, "suppressed", suppressed)
		}
		return
	}
	s.log.Debug("liveness connection of an instance of the group", "instance", peer.host, "remote", c.RemoteAddr().String())
	io.Copy(io.Discard, c) // until the peer or close ends it
}

// close stops listening and ends every connection: the peers then find the
// address refusing.
func (s *peerServer) close() {
	s.mu.Lock()
	s.closed = true
	s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// advertisedPeer is the address the other instances dial: advertise when
// set, else the listen address's host when it names one, else this host's
// address on its route to the first broker that resolves.
func advertisedPeer(listen, advertise string, port int, brokers []string) (string, error) {
	if advertise != "" {
		return advertise, nil
	}
	ps := fmt.Sprint(port)
	if host, _, err := net.SplitHostPort(listen); err == nil && host != "" {
		if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
			return net.JoinHostPort(host, ps), nil
		}
	}
	for _, b := range brokers {
		// A UDP "connection" sends nothing: it only picks the route.
		c, err := net.Dial("udp", b)
		if err != nil {
			continue
		}
		ip := c.LocalAddr().(*net.UDPAddr).IP
		c.Close()
		return net.JoinHostPort(ip.String(), ps), nil
	}
	return "", fmt.Errorf("no route to any of the brokers %v to take this host's address from: set the peer advertise address", brokers)
}

// peerPort is the port every instance of the group advertises, as this
// one's config says: the port of advertise when set, else of listen; ""
// when that is 0 (any free port), which leaves the port of the addresses
// the instances dial unchecked.
func peerPort(listen, advertise string) string {
	addr := listen
	if advertise != "" {
		addr = advertise
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil || port == "0" {
		return ""
	}
	return port
}

// dialPeer connects to a peer's address and runs the dialer's handshake
// with secret as me.
func dialPeer(ctx context.Context, addr string, timeout time.Duration, secret []byte, me peerIdentity) (net.Conn, peerIdentity, error) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, peerIdentity{}, err
	}
	h, err := dialerHandshake(c, secret, me)
	if err != nil {
		c.Close()
		return nil, peerIdentity{}, err
	}
	return c, h, nil
}
