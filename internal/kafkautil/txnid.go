package kafkautil

import "strings"

// MemberTxnID tells whether id has the shape of the transactional IDs of
// group's exactly-once members, <group>-<instance id>-<thread>. The group's
// leader aborts the open transactions of such IDs whose member left the
// group (processor/fence.go), so no other producer may use that shape: the
// re-drive's state topic, its transactional ID, is checked against it.
func MemberTxnID(group, id string) bool {
	rest, ok := strings.CutPrefix(id, group+"-")
	if !ok {
		return false
	}
	i := strings.LastIndexByte(rest, '-')
	if i <= 0 || i == len(rest)-1 {
		return false
	}
	for _, r := range rest[i+1:] {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
