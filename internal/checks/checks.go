// Package checks holds the rules of the runtime's settings that the worker
// binary also applies to its flags before it builds a processor.Config, so
// that a bad flag fails at start with the flag's name, by the same rule.
package checks

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"time"
)

// Defaults of the health bounds (processor.Config.Health.ReadyStallAfter and
// LiveStallAfter).
const (
	ReadyStallAfter = 30 * time.Second
	LiveStallAfter  = 5 * time.Minute
)

// StallBounds is the ready and live stall bounds for a commit interval and
// transaction timeout, where ready or live 0 takes its default: records
// wait for the interval's end and then for the commit, so the ready bound
// is at least their sum, and the live bound at least twice the ready one.
func StallBounds(commitInterval, txnTimeout, ready, live time.Duration) (time.Duration, time.Duration) {
	if ready == 0 {
		ready = max(ReadyStallAfter, commitInterval+txnTimeout)
	}
	if live == 0 {
		live = max(LiveStallAfter, 2*ready)
	}
	return ready, live
}

// validInstanceID is what an instance ID may hold: it becomes part of
// transactional.id and group.instance.id, and a Kubernetes pod name (a
// StatefulSet's "dedup-0") fits.
var validInstanceID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,200}$`)

// InstanceID reports an instance ID that cannot name a transactional ID and
// a static group member ("" is valid: the one kept in the state dir).
func InstanceID(id string) error {
	if id != "" && !validInstanceID.MatchString(id) {
		return fmt.Errorf("instance ID %q: want 1 to 200 of A-Z a-z 0-9 . _ - (it names transactional IDs and the static group member)", id)
	}
	return nil
}

// MinPeerSecret is the shortest peer secret, in bytes.
const MinPeerSecret = 32

// Peers reports a peer address, advertised address or secret that cannot
// work: an address without a secret would open a listener that anyone
// could make abort transactions, a secret without an address does nothing,
// and a short secret can be guessed.
func Peers(listen, advertise string, secret []byte) error {
	if err := peerAddrs(listen, advertise); err != nil {
		return err
	}
	switch {
	case listen != "" && len(secret) == 0:
		return fmt.Errorf("peer address %q without a peer secret: the liveness connections are authenticated with it", listen)
	case listen == "" && len(secret) > 0:
		return errors.New("a peer secret without a peer address to listen on")
	case len(secret) > 0 && len(secret) < MinPeerSecret:
		return fmt.Errorf("peer secret of %d bytes: at least %d (e.g. openssl rand -base64 48)", len(secret), MinPeerSecret)
	}
	return nil
}

// peerAddrs reports a listen or advertise address that cannot work.
func peerAddrs(listen, advertise string) error {
	if listen == "" {
		if advertise != "" {
			return fmt.Errorf("peer advertise address %q without a peer address to listen on", advertise)
		}
		return nil
	}
	if _, _, err := net.SplitHostPort(listen); err != nil {
		return fmt.Errorf("peer address %q: want host:port (:0 for any port): %w", listen, err)
	}
	if advertise == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(advertise)
	if err != nil || host == "" || port == "" || port == "0" {
		return fmt.Errorf("peer advertise address %q: want host:port that the other instances can dial", advertise)
	}
	return nil
}
