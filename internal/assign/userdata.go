package assign

import (
	"encoding/binary"
)

// userData travels both ways. In a member's subscription (JoinGroup) it is
// the member's previous assignment (generation, partitions) and, with
// standby replicas, its host and the standbys it holds and has caught up.
// In an assignment (SyncGroup) it is the generation, the partitions, and
// the standbys and warm-ups the member is to hold.
type userData struct {
	generation int32
	partitions []int32
	host       string  // the member's process: its instance (version 2)
	standbys   []int32 // held (subscription) or to hold (assignment)
	warmups    []int32 // assignment: standbys the member will own once caught up
	caughtUp   []int32 // subscription: standbys within the acceptable lag
	// inputFirst (subscription, version 3): the member consumes an input
	// partition whose table another member holds, forwarding what it
	// would judge there (plan.go's inputs).
	inputFirst bool
	// peer (subscription, version 4): where the member's process answers
	// its peers' liveness connections (host:port), so that they learn of
	// its death at once (processor's peers.go).
	peer string
}

// Version 1 is the generation and the partitions, big-endian int32s after
// the version byte. Version 2 appends the host (a uint16 length and its
// bytes) and three more lists; version 3 a flags byte (bit 0: inputFirst).
// A member sends the lowest version that holds what it says: one without
// standbys sends version 1, so a group of such members reads the same
// bytes as releases before standby replicas. Releases that do not know a
// version read it as no previous assignment (less sticky, still correct).
const (
	userDataV1 = 1
	userDataV2 = 2
	userDataV3 = 3
	userDataV4 = 4

	flagInputFirst = 1
)

func encode(d userData) []byte {
	version := byte(userDataV1)
	switch {
	case d.peer != "":
		version = userDataV4
	case d.inputFirst:
		version = userDataV3
	case d.host != "" || len(d.standbys)+len(d.warmups)+len(d.caughtUp) > 0:
		version = userDataV2
	}
	b := make([]byte, 0, 64)
	b = append(b, version)
	b = binary.BigEndian.AppendUint32(b, uint32(d.generation))
	b = appendList(b, d.partitions)
	if version == userDataV1 {
		return b
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(d.host)))
	b = append(b, d.host...)
	b = appendList(b, d.standbys)
	b = appendList(b, d.warmups)
	b = appendList(b, d.caughtUp)
	if version == userDataV2 {
		return b
	}
	flags := byte(0)
	if d.inputFirst {
		flags |= flagInputFirst
	}
	b = append(b, flags)
	if version == userDataV3 {
		return b
	}
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

// decode reads user data encode wrote; false for anything else, which Plan
// takes as a member without previous partitions: the assignment stays
// correct, only less sticky.
func decode(b []byte) (userData, bool) {
	if len(b) < 5 || b[0] < userDataV1 || b[0] > userDataV4 {
		return userData{}, false
	}
	version := b[0]
	r := reader{b: b[5:]}
	d := userData{generation: int32(binary.BigEndian.Uint32(b[1:])), partitions: r.list()}
	if version >= userDataV2 {
		d.host = r.str()
		d.standbys, d.warmups, d.caughtUp = r.list(), r.list(), r.list()
	}
	if version >= userDataV3 {
		d.inputFirst = r.flags()&flagInputFirst != 0
	}
	if version >= userDataV4 {
		d.peer = r.str()
	}
	if r.bad || len(r.b) != 0 {
		return userData{}, false
	}
	return d, true
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
