package assign

import (
	"sync"

	"github.com/IBM/sarama"
)

// Member is the strategy of one group member that may hold standby
// replicas. Sticky is stateless because sarama carries the previous
// assignment for it; a member with standbys must also tell the leader
// which standbys it holds and has caught up, which changes between
// rebalances, so it writes its subscription itself
// (sarama.SubscriptionUserDataBalanceStrategy) and remembers its last
// assignment (sarama.OnAssignmentBalanceStrategy). The group leader plans
// with its own Replicas: every instance of a group should run with the
// same.
type Member struct {
	host      string
	replicas  int
	held      func() (standbys, caughtUp []int32)
	loopTopic string

	mu   sync.Mutex
	peer string              // Advertise's address
	last userData            // this member's latest assignment
	told map[string]userData // the latest plan this member made as leader
}

// NewMember returns the strategy of a member on host (its process's
// instance) planning replicas standbys per partition when it leads. held
// reports the standbys the member holds and those within the acceptable
// lag; nil for none. loopTopic, when not "", is the topic whose partitions
// are the tables, and says the member can consume an input partition
// whose table another member holds: with standbys, a member warming a
// partition up then consumes its inputs at once (groupPlan.inputs), when
// every member of the group can.
func NewMember(host string, replicas int, held func() (standbys, caughtUp []int32), loopTopic string) *Member {
	return &Member{host: host, replicas: replicas, held: held, loopTopic: loopTopic}
}

func (m *Member) Name() string { return Name }

// Advertise makes the member's next subscriptions carry its host and addr,
// where its process answers the liveness connections of the group's other
// instances (PeerOf reads it back).
func (m *Member) Advertise(addr string) {
	m.mu.Lock()
	m.peer = addr
	m.mu.Unlock()
}

// PeerOf reads a member's subscription user data: its host and the address
// it advertised; ok is false when it advertised none (an instance that has
// the liveness connections off) or the user data does not decode.
func PeerOf(subscription []byte) (host, addr string, ok bool) {
	d, err := decode(subscription)
	if err != nil || d.peer == "" {
		return "", "", false
	}
	return d.host, d.peer, true
}

// Plan is Sticky's plan with the standbys and warm-ups (plan.go).
func (m *Member) Plan(members map[string]sarama.ConsumerGroupMemberMetadata, topics map[string][]int32) (sarama.BalanceStrategyPlan, error) {
	plan, told, err := makePlan(members, topics, m.replicas, m.loopTopic)
	m.mu.Lock()
	m.told = told
	m.mu.Unlock()
	return plan, err
}

// AssignmentData tells memberID its partitions (its tables), standbys and
// warm-ups of the plan just made.
func (m *Member) AssignmentData(memberID string, topics map[string][]int32, generationID int32) ([]byte, error) {
	m.mu.Lock()
	d := m.told[memberID]
	m.mu.Unlock()
	d.generation, d.partitions = generationID, partitionsOf(topics, m.loopTopic)
	return encode(d), nil
}

// SubscriptionUserData is the member's previous assignment and, with
// standbys, its host and the standbys it holds; with an advertised
// address, its host and that address.
func (m *Member) SubscriptionUserData([]string) ([]byte, error) {
	m.mu.Lock()
	d := userData{generation: m.last.generation, partitions: m.last.partitions, peer: m.peer}
	m.mu.Unlock()
	if m.replicas > 0 || m.held != nil || d.peer != "" {
		d.host = m.host
	}
	d.inputFirst = m.replicas > 0 && m.loopTopic != ""
	if m.held != nil {
		d.standbys, d.caughtUp = m.held()
	}
	return encode(d), nil
}

// OnAssignment keeps the member's assignment for its next subscription and
// for Assigned.
func (m *Member) OnAssignment(a *sarama.ConsumerGroupMemberAssignment, generationID int32) {
	d, _ := decode(a.UserData) // zero when it does not decode: no standbys
	d.generation, d.partitions = generationID, partitionsOf(a.Topics, m.loopTopic)
	m.mu.Lock()
	m.last = d
	m.mu.Unlock()
}

// Assigned is the member's standbys in its latest assignment, and which of
// them are warm-ups: partitions it will own once it has caught up.
func (m *Member) Assigned() (standbys, warmups []int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last.standbys, m.last.warmups
}
