package processor

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/assign"
	"github.com/dedupkit/dedup/internal/kafkautil"
)

// A member that dies with a transaction open (kill -9, a lost node) leaves
// that transaction to the broker, which aborts it only once the transaction
// timeout has passed and its next check for expired transactions ran
// (transaction.abort.timed.out.transaction.cleanup.interval.ms, 10 s by
// default). Until then the transaction pins its partitions' last stable
// offset and its pending offset commit: the member that takes the dead one's
// partitions over cannot read their committed offsets (sarama's offset fetch
// asks for stable offsets) nor restore their tables past it. After a
// kill -9 that is not followed by a restart on the same identity, this
// would be the larger part of the takeover's pause.
//
// The group leader closes that gap when it plans the new assignment: every
// transactional ID of the group's members (<group>-<instance>-<thread>) that
// has a transaction open but is no longer a member of the group is fenced by
// an InitProducerId on its ID, which makes its coordinator abort the
// transaction at once. A member is no longer a member only after its session
// timed out, it left, or it was fenced, so the fenced producer is dead or a
// zombie whose writes must fail anyway; a live member in the plan is never
// fenced. The members' planned assignment goes out only after the aborts, so
// no member reads a partition while a dead transaction still holds it. The
// plan only chooses those IDs; the Processor's aborter (abort.go) lists the
// open transactions and fences them.
//
// So the takeover waits at most: the session timeout (for the group to
// notice the death), a heartbeat interval (for every member to rejoin), and
// the fencing's round trips. Without the fencing (it failed, or the leader
// runs an older version) it waits until the broker expires the transaction,
// at most the transaction timeout plus the cleanup interval after the
// transaction began.

// fencingStrategy is the member's balance strategy with the fencing of dead
// members' transactions before each plan.
type fencingStrategy struct {
	sarama.BalanceStrategy
	aborter *aborter
	log     *slog.Logger // the member's
}

// fencing wraps s for a member that logs on log, keeping the hooks of a
// strategy that writes its own subscription and hears of its assignment
// (assign.Member).
func fencing(s sarama.BalanceStrategy, a *aborter, log *slog.Logger) sarama.BalanceStrategy {
	fs := &fencingStrategy{BalanceStrategy: s, aborter: a, log: log}
	if m, ok := s.(*assign.Member); ok {
		return &fencingMember{fencingStrategy: fs, m: m}
	}
	return fs
}

// fencingMember is fencingStrategy around an assign.Member.
type fencingMember struct {
	*fencingStrategy
	m *assign.Member
}

func (s *fencingMember) SubscriptionUserData(topics []string) ([]byte, error) {
	return s.m.SubscriptionUserData(topics)
}

func (s *fencingMember) OnAssignment(a *sarama.ConsumerGroupMemberAssignment, generationID int32) {
	s.m.OnAssignment(a, generationID)
}

// Plan fences the transactions of producers that are no longer members of
// the group, then plans as the wrapped strategy does.
func (s *fencingStrategy) Plan(members map[string]sarama.ConsumerGroupMemberMetadata, topics map[string][]int32) (sarama.BalanceStrategyPlan, error) {
	s.abortLeft()
	return s.BalanceStrategy.Plan(members, topics)
}

// abortLeft aborts the open transactions of the group's members that are
// no longer in it. It logs and gives up on errors, as the broker's own
// expiry remains the fallback. Its client lives for one plan: plans are as
// rare as rebalances.
func (s *fencingStrategy) abortLeft() {
	const failed = "could not look for transactions left open by members that left the group; " +
		"their partitions wait for the broker to abort them (transaction timeout)"
	client, err := s.aborter.connect()
	if err != nil {
		s.log.Warn(failed, "err", err)
		return
	}
	defer client.Close()
	live, err := s.aborter.members(client)
	var open []string
	var partial error
	if err == nil {
		open, partial, err = s.aborter.list(client)
	}
	switch {
	case errors.Is(err, sarama.ErrUnsupportedVersion):
		s.log.Info("the brokers predate Kafka 3.0 (no ListTransactions): a member's transaction left open when it died "+
			"holds its partitions' next owner until the broker aborts it (transaction timeout)", "err", err)
		return
	case err != nil:
		s.log.Warn(failed, "err", err)
		return
	case partial != nil:
		s.log.Warn("some brokers did not list their open transactions: a transaction they coordinate, left open by a member "+
			"that left the group, waits for the broker to abort it (transaction timeout)", "err", partial)
	}
	s.aborter.abort(s.log, triggerPlan, deadOf(s.aborter.group, live, open))
}

// deadOf are the transactional IDs in open that are the group's members'
// but not one of live's, sorted, each once.
func deadOf(group string, live, open []string) []string {
	var dead []string
	for _, id := range open {
		if kafkautil.MemberTxnID(group, id) && !slices.Contains(live, id) {
			dead = append(dead, id)
		}
	}
	slices.Sort(dead)
	return slices.Compact(dead)
}

// groupMembers are the group.instance.ids of group's members; a member's
// is its producer's transactional ID (processor.go).
func groupMembers(client sarama.Client, group string) ([]string, error) {
	g, err := describeGroup(client, group)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, m := range g.Members {
		if m.GroupInstanceId == nil {
			// A dynamic member: its producer's ID cannot be told, so
			// nothing is known to be dead.
			return nil, fmt.Errorf("group %s has a member without an instance ID (%s)", group, m.ClientId)
		}
		ids = append(ids, *m.GroupInstanceId)
	}
	return ids, nil
}

// describeGroup asks group's coordinator for its members.
func describeGroup(client sarama.Client, group string) (*sarama.GroupDescription, error) {
	coord, err := client.Coordinator(group)
	if err != nil {
		return nil, fmt.Errorf("coordinator of group %s: %w", group, err)
	}
	resp, err := coord.DescribeGroups(&sarama.DescribeGroupsRequest{Version: 5, Groups: []string{group}})
	if err != nil {
		return nil, fmt.Errorf("describe group %s: %w", group, err)
	}
	if len(resp.Groups) != 1 {
		return nil, fmt.Errorf("describe group %s: %d groups in the answer", group, len(resp.Groups))
	}
	g := resp.Groups[0]
	if !errors.Is(g.Err, sarama.ErrNoError) {
		return nil, fmt.Errorf("describe group %s: %w", group, g.Err)
	}
	return g, nil
}
