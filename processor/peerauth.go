package processor

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"
)

// Every liveness connection starts with a mutual challenge-response over
// Config.Peers.Secret, before either side says anything that identifies it:
// a death told over a liveness connection aborts the dead instance's
// transactions, so only an instance that knows the group's secret may take
// part, and a stranger that connects must learn nothing (no group, no
// instance name, no incarnation).
//
//	listener → dialer   "dedup-peer/2 <listener nonce>"
//	dialer → listener   "dedup-peer/2 <dialer nonce> <dialer proof>"
//	listener → dialer   "<listener proof>"                    (dialer's proof checked)
//	dialer → listener   "<group> <dialer host>"               (listener's proof checked)
//	listener → dialer   "<group> <listener host> <incarnation>"
//
// A proof is HMAC-SHA256 under the secret of a label naming the side that
// sends it and both nonces (hex, 32 random bytes each): a proof reflected
// back to its sender carries the other side's label and fails, a recorded
// one fails against a fresh nonce. Each side checks the other's proof
// (hmac.Equal) before it sends its identity; the listener also drops a
// dialer of another group that shares the secret. The whole exchange has
// peerHandshakeTimeout, and a line longer than maxPeerLine ends it.
//
// The connection is not encrypted: someone on the path can read the names
// once the proofs passed, and cut or hold the connection, as they can any
// TCP connection (docs/security.md's threat model).

// peerProto starts the first line of each side.
const peerProto = "dedup-peer/2"

// peerNonceLen is the random bytes of each side's nonce.
const peerNonceLen = 32

// maxPeerLine bounds one handshake line, newline included: a group name and
// a host are at most 249 and 450 bytes.
const maxPeerLine = 1024

// peerHandshakeTimeout bounds a whole handshake, either side.
const peerHandshakeTimeout = 2 * time.Second

// MinPeerSecret is the shortest Config.Peers.Secret, in bytes.
const MinPeerSecret = 32

// errPeerAuth marks a handshake that failed because the other side did not
// prove the secret or did not speak the protocol: never a death.
var errPeerAuth = errors.New("liveness connection refused: the other side did not prove the peer secret")

// Labels of the two proofs.
const (
	proofByListener = "listener"
	proofByDialer   = "dialer"
)

// peerIdentity is what an authenticated side tells the other.
type peerIdentity struct {
	group, host, incarnation string
}

// peerProof is side's proof of the secret over both nonces.
func peerProof(secret []byte, side string, listenerNonce, dialerNonce []byte) []byte {
	m := hmac.New(sha256.New, secret)
	fmt.Fprintf(m, "%s %s\n", peerProto, side)
	m.Write(listenerNonce)
	m.Write(dialerNonce)
	return m.Sum(nil)
}

// handshake is one side of a connection's handshake: reads bounded lines.
type handshake struct {
	c      net.Conn
	r      *bufio.Reader
	secret []byte
}

func newHandshake(c net.Conn, secret []byte) *handshake {
	return &handshake{c: c, r: bufio.NewReaderSize(c, maxPeerLine), secret: secret}
}

// line reads one line without its newline, at most maxPeerLine bytes.
func (h *handshake) line() (string, error) {
	b, err := h.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return "", fmt.Errorf("%w: a line longer than %d bytes", errPeerAuth, maxPeerLine)
	}
	if err != nil {
		return "", fmt.Errorf("liveness handshake: %w", err)
	}
	return string(b[:len(b)-1]), nil
}

// fields reads a line of n space-separated fields.
func (h *handshake) fields(n int) ([]string, error) {
	l, err := h.line()
	if err != nil {
		return nil, err
	}
	f := strings.Split(l, " ")
	if len(f) != n || slices.Contains(f, "") {
		return nil, fmt.Errorf("%w: a line of %d fields, want %d", errPeerAuth, len(f), n)
	}
	return f, nil
}

func (h *handshake) write(format string, args ...any) error {
	if _, err := fmt.Fprintf(h.c, format+"\n", args...); err != nil {
		return fmt.Errorf("liveness handshake: %w", err)
	}
	return nil
}

// decode reads a hex field of n bytes.
func decode(field string, n int) ([]byte, error) {
	b, err := hex.DecodeString(field)
	if err != nil || len(b) != n {
		return nil, fmt.Errorf("%w: a malformed nonce or proof", errPeerAuth)
	}
	return b, nil
}

func nonce() []byte {
	b := make([]byte, peerNonceLen)
	rand.Read(b) // never fails (crypto/rand)
	return b
}

// listenerHandshake runs the listener's side on an accepted connection and
// returns the authenticated dialer's identity (no incarnation).
func listenerHandshake(c net.Conn, secret []byte, me peerIdentity) (peerIdentity, error) {
	c.SetDeadline(time.Now().Add(peerHandshakeTimeout))
	defer c.SetDeadline(time.Time{})
	h := newHandshake(c, secret)
	mine := nonce()
	if err := h.write("%s %x", peerProto, mine); err != nil {
		return peerIdentity{}, err
	}
	f, err := h.fields(3)
	if err != nil {
		return peerIdentity{}, err
	}
	if f[0] != peerProto {
		return peerIdentity{}, fmt.Errorf("%w: not %s", errPeerAuth, peerProto)
	}
	theirs, err := decode(f[1], peerNonceLen)
	if err != nil {
		return peerIdentity{}, err
	}
	proof, err := decode(f[2], sha256.Size)
	if err != nil {
		return peerIdentity{}, err
	}
	if hmac.Equal(theirs, mine) || !hmac.Equal(proof, peerProof(secret, proofByDialer, mine, theirs)) {
		return peerIdentity{}, fmt.Errorf("%w: a wrong proof", errPeerAuth)
	}
	if err := h.write("%x", peerProof(secret, proofByListener, mine, theirs)); err != nil {
		return peerIdentity{}, err
	}
	f, err = h.fields(2)
	if err != nil {
		return peerIdentity{}, err
	}
	if f[0] != me.group {
		return peerIdentity{}, fmt.Errorf("%w: an instance of group %q, not this one's", errPeerAuth, f[0])
	}
	if err := h.write("%s %s %s", me.group, me.host, me.incarnation); err != nil {
		return peerIdentity{}, err
	}
	return peerIdentity{group: f[0], host: f[1]}, nil
}

// dialerHandshake runs the dialer's side on a connection it dialled and
// returns the authenticated listener's identity, which must be of me's group.
func dialerHandshake(c net.Conn, secret []byte, me peerIdentity) (peerIdentity, error) {
	c.SetDeadline(time.Now().Add(peerHandshakeTimeout))
	defer c.SetDeadline(time.Time{})
	h := newHandshake(c, secret)
	f, err := h.fields(2)
	if err != nil {
		return peerIdentity{}, err
	}
	if f[0] != peerProto {
		return peerIdentity{}, fmt.Errorf("%w: not %s", errPeerAuth, peerProto)
	}
	theirs, err := decode(f[1], peerNonceLen)
	if err != nil {
		return peerIdentity{}, err
	}
	mine := nonce()
	if err := h.write("%s %x %x", peerProto, mine, peerProof(secret, proofByDialer, theirs, mine)); err != nil {
		return peerIdentity{}, err
	}
	f, err = h.fields(1)
	if err != nil {
		return peerIdentity{}, err
	}
	proof, err := decode(f[0], sha256.Size)
	if err != nil {
		return peerIdentity{}, err
	}
	if !hmac.Equal(proof, peerProof(secret, proofByListener, theirs, mine)) {
		return peerIdentity{}, fmt.Errorf("%w: a wrong proof", errPeerAuth)
	}
	if err := h.write("%s %s", me.group, me.host); err != nil {
		return peerIdentity{}, err
	}
	f, err = h.fields(3)
	if err != nil {
		return peerIdentity{}, err
	}
	if f[0] != me.group {
		return peerIdentity{}, fmt.Errorf("%w: an instance of group %q, not this one's", errPeerAuth, f[0])
	}
	return peerIdentity{group: f[0], host: f[1], incarnation: f[2]}, nil
}

// logLimit lets one log line through per interval and counts the others,
// so that a stranger hammering the listener cannot flood the log.
type logLimit struct {
	every time.Duration

	mu         sync.Mutex
	next       time.Time
	suppressed int
}

// allow reports whether to log now, and how many were suppressed since
// the last line logged.
func (l *logLimit) allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Before(l.next) {
		l.suppressed++
		return false, 0
	}
	n := l.suppressed
	l.next, l.suppressed = now.Add(l.every), 0
	return true, n
}
