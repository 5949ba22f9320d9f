package processor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/assign"
	"github.com/dedupkit/dedup/internal/kafkautil"
)

// peerRefresh is how often the watch reads the group's members for peers
// it does not watch yet, besides the session starts its members tell it of.
const peerRefresh = 30 * time.Second

// peerProbeTimeout bounds the dial that tells a dead peer from a cut
// connection: only a refusal counts as a death, so a slow answer is an
// uncertain one.
const peerProbeTimeout = time.Second

// peerProbeTries is how many dials probe makes while the address accepts
// and at once closes: a dying process may close its connections a moment
// before its listener.
const peerProbeTries = 5

// peerWatch holds an authenticated liveness connection to every other
// instance of the group that advertises one on the group's port (peers.go)
// and has the Processor's aborter (abort.go) fence the open transactions of
// those it sees die. Processor.run owns run; each peer's watcher is a
// goroutine run starts and waits for.
type peerWatch struct {
	self    string // this instance's host: not watched
	aborter *aborter
	log     *slog.Logger
	// port is the only port dialled (peerPort); "": any.
	port string
	wake chan struct{}
	// dial connects to a peer and runs the handshake (dialPeer; tests cut it).
	dial func(ctx context.Context, addr string, timeout time.Duration) (net.Conn, peerIdentity, error)
	// died is told of a peer seen to die (dead; tests count).
	died func(host string)

	mu          sync.Mutex
	watching    map[string]bool // host+" "+addr of the running watchers
	unreachable map[string]bool // host+" "+addr told unreachable once: debug after that
	connected   int
}

// newPeerWatch watches the peers of a's group as self, proving secret,
// dials only port ("": any) and logs on log.
func newPeerWatch(a *aborter, log *slog.Logger, self string, secret []byte, port string) *peerWatch {
	w := &peerWatch{self: self, aborter: a, log: log, port: port, wake: make(chan struct{}, 1),
		watching: map[string]bool{}, unreachable: map[string]bool{}}
	me := peerIdentity{group: a.group, host: self}
	w.dial = func(ctx context.Context, addr string, timeout time.Duration) (net.Conn, peerIdentity, error) {
		return dialPeer(ctx, addr, timeout, secret, me)
	}
	w.died = w.dead
	return w
}

// refresh makes run read the group's members now; it never blocks.
func (w *peerWatch) refresh() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run watches the peers the group's members advertise, reading them at
// start, at each refresh and every peerRefresh, until ctx is done; then it
// waits for its watchers.
func (w *peerWatch) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	var client sarama.Client
	defer func() {
		if client != nil {
			client.Close()
		}
	}()
	tick := time.NewTicker(peerRefresh)
	defer tick.Stop()
	for {
		peers, err := w.peers(&client)
		if err != nil {
			w.log.Warn("could not read the group's members for their liveness addresses; retrying", "err", err)
		}
		for host, addr := range peers {
			w.start(ctx, &wg, host, addr)
		}
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-tick.C:
		}
	}
}

// peers reads the group's members' advertised addresses by host, on
// *client, which it makes when nil and drops after an error. An address
// on another port than the group's is left out: a member's subscription
// must not make the instances dial any service it names.
func (w *peerWatch) peers(client *sarama.Client) (map[string]string, error) {
	if *client == nil {
		c, err := sarama.NewClient(w.aborter.cfg.Brokers, adminConfig(w.aborter.cfg, w.aborter.name))
		if err != nil {
			return nil, err
		}
		*client = c
	}
	g, err := describeGroup(*client, w.aborter.group)
	if err != nil {
		(*client).Close()
		*client = nil
		return nil, err
	}
	peers := map[string]string{}
	// A name two members advertise at different addresses is watched at
	// neither: one of them may relay the other's handshake to fake its death.
	twice := map[string]bool{}
	for _, m := range g.Members {
		meta, err := m.GetMemberMetadata()
		if err != nil || meta == nil {
			continue
		}
		host, addr, ok := assign.PeerOf(meta.UserData)
		if !ok || host == w.self {
			continue
		}
		if !w.dialable(addr) {
			if w.tellOnce(host, addr) {
				w.log.Warn("a member of the group advertises a liveness address on another port than this "+
					"instance's: not dialled (give every instance the same --peer-addr port)",
					"instance", host, "addr", addr, "port", w.port)
			}
			continue
		}
		if prev, ok := peers[host]; ok && prev != addr {
			twice[host] = true
		}
		peers[host] = addr
	}
	for host := range twice {
		delete(peers, host)
		w.log.Warn("two members of the group advertise one instance name at different liveness addresses: "+
			"neither is watched", "instance", host)
	}
	return peers, nil
}

// dialable reports whether addr is on the group's port.
func (w *peerWatch) dialable(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	return err == nil && (w.port == "" || port == w.port)
}

// tellOnce reports whether host at addr is to be told of at info or warn:
// the first time only, debug after that.
func (w *peerWatch) tellOnce(host, addr string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	told := w.unreachable[host+" "+addr]
	w.unreachable[host+" "+addr] = true
	return !told
}

// start runs a watcher of host at addr unless one runs.
func (w *peerWatch) start(ctx context.Context, wg *sync.WaitGroup, host, addr string) {
	key := host + " " + addr
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.watching[key] {
		return
	}
	w.watching[key] = true
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() {
			w.mu.Lock()
			delete(w.watching, key)
			w.mu.Unlock()
		}()
		w.watch(ctx, host, addr)
	}()
}

// watch holds a liveness connection to host at addr until ctx is done, the
// address stops answering as host, or host dies (then it fences host's
// open transactions). A peer that cannot be reached from here is tried
// again at the next refresh.
func (w *peerWatch) watch(ctx context.Context, host, addr string) {
	c, h, err := w.dial(ctx, addr, peerProbeTimeout)
	if err == nil && h.host != host {
		c.Close()
		err = fmt.Errorf("answered as %s", h.host)
	}
	if err != nil {
		if ctx.Err() == nil {
			// Once per address: it is dialled again at every refresh.
			level := slog.LevelDebug
			if w.tellOnce(host, addr) {
				level = slog.LevelInfo
				if errors.Is(err, errPeerAuth) {
					level = slog.LevelWarn
				}
			}
			w.log.Log(ctx, level, "no liveness connection to an instance of the group: its death is noticed after --fence-stuck-after",
				"instance", host, "addr", addr, "err", err)
		}
		return
	}
	w.count(+1)
	defer w.count(-1)
	for {
		stop := context.AfterFunc(ctx, func() { c.Close() })
		io.Copy(io.Discard, c) // until the connection ends
		stop()
		c.Close()
		if ctx.Err() != nil {
			return
		}
		gone, next, nh, err := w.probe(ctx, host, addr)
		if gone {
			w.died(host)
			return
		}
		if next == nil {
			// Cut, slow to answer, or not answered by an instance that
			// proved the secret: not known to be dead.
			w.log.Info("lost the liveness connection to an instance of the group; its address did not refuse, "+
				"so it is not taken for dead", "instance", host, "addr", addr, "err", err)
			return
		}
		if nh.incarnation != h.incarnation {
			w.log.Info("an instance of the group restarted", "instance", host, "addr", addr)
		}
		c, h = next, nh
	}
}

// probe dials host at addr after its authenticated connection ended: gone
// when the address refuses, else the new connection (nil, and why, when it
// was not answered as host's after a proof of the secret).
func (w *peerWatch) probe(ctx context.Context, host, addr string) (gone bool, c net.Conn, h peerIdentity, err error) {
	for try := 0; try < peerProbeTries; try++ {
		c, h, err = w.dial(ctx, addr, peerProbeTimeout)
		switch {
		case err == nil && h.host == host:
			return false, c, h, nil
		case err == nil:
			c.Close()
			return false, nil, peerIdentity{}, fmt.Errorf("answered as %s", h.host)
		case errors.Is(err, syscall.ECONNREFUSED):
			return true, nil, peerIdentity{}, nil
		case errors.Is(err, errPeerAuth):
			return false, nil, peerIdentity{}, err
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET):
			// Accepted by a listener on its way out: look again.
			if !sleep(ctx, 20*time.Millisecond) {
				return false, nil, peerIdentity{}, err
			}
		default:
			return false, nil, peerIdentity{}, err
		}
	}
	return false, nil, peerIdentity{}, err
}

// dead aborts the open transactions of host, whose process is gone: all of
// its members'.
func (w *peerWatch) dead(host string) {
	start := time.Now()
	ids, err := w.openOf(host)
	fenced, ferr := w.aborter.abort(w.log, triggerPeer, ids)
	err = errors.Join(err, ferr)
	took := time.Since(start).Round(time.Millisecond)
	switch {
	case err != nil:
		w.log.Warn("an instance of the group is gone, and not all its open transactions could be aborted: "+
			"the partitions they hold wait for --fence-stuck-after", "instance", host, "fenced", fenced, "err", err, "took", took)
	case fenced > 0:
		w.log.Warn("an instance of the group died with transactions open; aborted them so that the partitions they held go on",
			"instance", host, "fenced", fenced, "took", took)
	default:
		w.log.Info("an instance of the group is gone (stopped, or died between transactions)", "instance", host)
	}
}

// openOf lists the open transactions of host's members; with some brokers
// silent, those the others listed and why not all.
func (w *peerWatch) openOf(host string) ([]string, error) {
	client, err := w.aborter.connect()
	if err != nil {
		return nil, err
	}
	defer client.Close()
	open, partial, err := w.aborter.list(client)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, id := range open {
		if kafkautil.InstanceTxnID(host, id) {
			ids = append(ids, id)
		}
	}
	return ids, partial
}

// count changes the number of connected peers and reports it.
func (w *peerWatch) count(delta int) {
	w.mu.Lock()
	w.connected += delta
	n := w.connected
	w.mu.Unlock()
	w.aborter.hooks.PeersWatched(n)
}
