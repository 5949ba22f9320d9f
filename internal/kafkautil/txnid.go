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
	return i > 0 && thread(rest[i+1:])
}

// InstanceTxnID tells whether id is the transactional ID of one of the
// members of instance host (<group>-<instance id>): <host>-<thread>. An
// instance "a" is not "a-1".
func InstanceTxnID(host, id string) bool {
	t, ok := strings.CutPrefix(id, host+"-")
	return ok && thread(t)
}

// thread tells whether s is a member's thread number: digits, at least one.
func thread(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
