package assign

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// userData travels both ways. In a member's subscription (JoinGroup) it is
// the member's previous assignment (generation, partitions) and, with
// standby replicas, its host and the standbys it holds and has caught up.
// In an assignment (SyncGroup) it is the generation, the partitions, and
// the standbys and warm-ups the member is to hold.
type userData struct {
	generation int32
	partitions []int32
	host       string  // the member's process: its instance
	standbys   []int32 // held (subscription) or to hold (assignment)
	warmups    []int32 // assignment: standbys the member will own once caught up
	caughtUp   []int32 // subscription: standbys within the acceptable lag
	// inputFirst (subscription): the member consumes an input partition
	// whose table another member holds, forwarding what it would judge
	// there (plan.go's inputs).
	inputFirst bool
	// peer (subscription): where the member's process answers its peers'
	// liveness connections (host:port), so that they learn of its death at
	// once (processor's peers.go).
	peer string
}

// The bytes are the version byte, then the generation and the partitions
// (big-endian int32s; a list is a uint32 count and its elements), the host
// (a uint16 length and its bytes), the standbys, warm-ups and caught-up
// lists, a flags byte (bit 0: inputFirst) and the peer address (as the
// host). decode refuses any other version: every member of a group must
// write this one.
const (
	userDataVersion = 4

	flagInputFirst = 1
)

func encode(d userData) []byte {
	b := make([]byte, 0, 64)
	b = append(b, userDataVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(d.generation))
	b = appendList(b, d.partitions)
	b = binary.BigEndian.AppendUint16(b, uint16(len(d.host)))
	b = append(b, d.host...)
	b = appendList(b, d.standbys)
	b = appendList(b, d.warmups)
	b = appendList(b, d.caughtUp)
	flags := byte(0)
	if d.inputFirst {
		flags |= flagInputFirst
	}
	b = append(b, flags)
	b = binary.BigEndian.AppendUint16(b, uint16(len(d.peer)))
	return append(b, d.peer...)
}

func appendList(b []byte, ps []int32) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(ps)))
	for _, p := range ps {
		b = binary.BigEndian.AppendUint32(b, uint32(p))
	}
	return b
}

// decode reads user data encode wrote, and says why it cannot read
// anything else: another version, or bytes cut short or too long.
func decode(b []byte) (userData, error) {
	if len(b) == 0 {
		return userData{}, errors.New("no user data")
	}
	if b[0] != userDataVersion {
		return userData{}, fmt.Errorf("user data of version %d, and this build reads version %d only: every member of the group must run a build that writes version %d",
			b[0], userDataVersion, userDataVersion)
	}
	if len(b) < 5 {
		return userData{}, fmt.Errorf("user data of %d bytes: too short for version %d", len(b), userDataVersion)
	}
	r := reader{b: b[5:]}
	d := userData{generation: int32(binary.BigEndian.Uint32(b[1:])), partitions: r.list()}
	d.host = r.str()
	d.standbys, d.warmups, d.caughtUp = r.list(), r.list(), r.list()
	d.inputFirst = r.flags()&flagInputFirst != 0
	d.peer = r.str()
	if r.bad {
		return userData{}, fmt.Errorf("user data of %d bytes: cut short (version %d)", len(b), userDataVersion)
	}
	if len(r.b) != 0 {
		return userData{}, fmt.Errorf("user data of %d bytes: %d left over after the fields of version %d", len(b), len(r.b), userDataVersion)
	}
	return d, nil
}

// reader reads encode's fields; bad once one did not fit.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) list() []int32 {
	if r.bad || len(r.b) < 4 {
		r.bad = true
		return nil
	}
	n := binary.BigEndian.Uint32(r.b)
	r.b = r.b[4:]
	if uint64(len(r.b)) < 4*uint64(n) {
		r.bad = true
		return nil
	}
	ps := make([]int32, n)
	for i := range ps {
		ps[i] = int32(binary.BigEndian.Uint32(r.b[4*i:]))
	}
	r.b = r.b[4*n:]
	return ps
}

func (r *reader) flags() byte {
	if r.bad || len(r.b) < 1 {
		r.bad = true
		return 0
	}
	f := r.b[0]
	r.b = r.b[1:]
	return f
}

func (r *reader) str() string {
	if r.bad || len(r.b) < 2 {
		r.bad = true
		return ""
	}
	n := int(binary.BigEndian.Uint16(r.b))
	if len(r.b) < 2+n {
		r.bad = true
		return ""
	}
	s := string(r.b[2 : 2+n])
	r.b = r.b[2+n:]
	return s
}
