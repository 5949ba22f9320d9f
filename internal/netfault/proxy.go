// Package netfault is a TCP proxy that tests put between a Kafka client and
// a broker to cut the network between them while both keep running: the
// fault a SIGKILL or SIGSTOP does not produce. A process that is partitioned
// away goes on running its loop, its heartbeats and requests fail or hang,
// and whatever it does when the network comes back has to be fenced.
//
// Kafka clients connect to the address a broker advertises, not the one
// they bootstrapped with, so the broker needs a listener that advertises the
// proxy's address (integration/kafka/kafka.sh gives every node one, see
// `kafka.sh proxy-routes`).
package netfault

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
)

// Route is one listen address of the proxy and the target it forwards to.
type Route struct{ Listen, Target string }

// ParseRoutes reads "listen=target[,listen=target...]", the format of
// `kafka.sh proxy-routes` and of KAFKA_PROXY_ROUTES.
func ParseRoutes(s string) ([]Route, error) {
	var routes []Route
	for _, part := range strings.Split(s, ",") {
		listen, target, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || listen == "" || target == "" {
			return nil, fmt.Errorf("route %q: want listen=target", part)
		}
		routes = append(routes, Route{listen, target})
	}
	return routes, nil
}

// state is what the proxy does with traffic.
type state int

const (
	open      state = iota // forward
	blackhole              // hold every byte and every new connection
	reset                  // close every connection, refuse new ones
)

// Proxy forwards each route's connections to its target until Cut.
type Proxy struct {
	listeners []net.Listener
	wg        sync.WaitGroup // accept loops and connection goroutines

	mu     sync.Mutex
	state  state
	healed chan struct{} // closed while open; a fresh one while cut
	closed bool
	conns  map[net.Conn]struct{} // both ends of every connection
	gaveUp int                   // connections their client closed during a Blackhole
}

// Start listens on every route's address.
func Start(routes []Route) (*Proxy, error) {
	if len(routes) == 0 {
		return nil, errors.New("netfault: no routes")
	}
	p := &Proxy{healed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.healed)
	for _, r := range routes {
		l, err := net.Listen("tcp", r.Listen)
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("netfault: listen on %s: %w", r.Listen, err)
		}
		p.listeners = append(p.listeners, l)
		p.wg.Add(1)
		go p.accept(l, r.Target)
	}
	return p, nil
}

// Addrs is the comma-separated list of the addresses listened on: the
// bootstrap list for a client that should go through the proxy.
func (p *Proxy) Addrs() string {
	var a []string
	for _, l := range p.listeners {
		a = append(a, l.Addr().String())
	}
	return strings.Join(a, ",")
}

// Blackhole stops all traffic the way a partition that drops packets does:
// connections stay open, bytes sent either way are held (TCP would
// retransmit them), new connections are accepted and held. Heal delivers
// what was held, also what a client sent before it gave up and closed its
// connection, as TCP delivers what was sent before a close.
func (p *Proxy) Blackhole() { p.cut(blackhole) }

// GaveUp is how many connections their client closed during a Blackhole:
// a client whose requests timed out closes their connection, so a test can
// wait for a client to have given up instead of guessing its timeouts.
func (p *Proxy) GaveUp() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gaveUp
}

// Reset closes every connection and refuses new ones until Heal, like a
// partition that answers with resets.
func (p *Proxy) Reset() {
	p.cut(reset)
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

func (p *Proxy) cut(s state) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == open {
		p.healed = make(chan struct{})
	}
	p.state = s
}

// Heal forwards again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state != open {
		p.state = open
		close(p.healed)
	}
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for _, l := range p.listeners {
		l.Close()
	}
	for c := range p.conns {
		c.Close()
	}
	if p.state != open {
		p.state = open
		close(p.healed)
	}
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

// gate blocks while traffic is held; it reports false when the connection
// must be dropped instead (reset, or the proxy closed).
func (p *Proxy) gate() bool {
	for {
		p.mu.Lock()
		s, healed, closed := p.state, p.healed, p.closed
		p.mu.Unlock()
		switch {
		case closed || s == reset:
			return false
		case s == open:
			return true
		}
		<-healed
	}
}

// track registers a connection so Reset and Close can close it; it reports
// false (and closes c) when the proxy is closing.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept(l net.Listener, target string) {
	defer p.wg.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			return // listener closed
		}
		if !p.track(c) {
			continue
		}
		p.wg.Add(1)
		go p.serve(c, target)
	}
}

// serve connects one client to the target once traffic may flow, then
// forwards both ways until either end closes. What the client sends is read
// at once, held or not, so that a client that gives up on a held connection
// is seen (GaveUp).
func (p *Proxy) serve(client net.Conn, target string) {
	defer p.wg.Done()
	defer p.untrack(client)
	fromClient := make(chan []byte, heldChunks)
	stop := make(chan struct{})
	defer close(stop) // before untrack: the reader may wait to hand a chunk
	p.wg.Add(1)
	go p.read(client, fromClient, stop)
	if !p.gate() {
		return
	}
	server, err := net.Dial("tcp", target)
	if err != nil {
		return // the client sees its connection closed, as with a dead broker
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	done := make(chan struct{}, 2)
	p.wg.Add(2)
	go p.copy(client, server, done)
	go p.forward(server, fromClient, done)
	<-done // one direction ended: close both, which ends the other
	client.Close()
	server.Close()
	<-done
}

// heldChunks bounds what the proxy holds of one client's bytes (32 KiB
// reads): past it the client's writes wait, as on a TCP connection whose
// peer stopped acknowledging.
const heldChunks = 64

// read hands what src sends to chunks until src closes. A close by the
// client (not by the proxy) while traffic is held counts as a give-up.
func (p *Proxy) read(src net.Conn, chunks chan<- []byte, stop <-chan struct{}) {
	defer p.wg.Done()
	defer close(chunks)
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case chunks <- buf[:n]:
			case <-stop:
				return
			}
		}
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				p.clientClosed()
			}
			return
		}
	}
}

func (p *Proxy) clientClosed() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == blackhole {
		p.gaveUp++
	}
}

// forward writes the client's chunks to dst, passing each through the gate.
func (p *Proxy) forward(dst net.Conn, chunks <-chan []byte, done chan<- struct{}) {
	defer p.wg.Done()
	defer func() { done <- struct{}{} }()
	for b := range chunks {
		if !p.gate() {
			return
		}
		if _, err := dst.Write(b); err != nil {
			return
		}
	}
}

// copy forwards src to dst, passing each chunk through the gate.
func (p *Proxy) copy(dst, src net.Conn, done chan<- struct{}) {
	defer p.wg.Done()
	defer func() { done <- struct{}{} }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.gate() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed connection: serve closes both ends
		}
	}
}
