package processor

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

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
// no member reads a partition while a dead transaction still holds it.
//
// So the takeover waits at most: the session timeout (for the group to
// notice the death), a heartbeat interval (for every member to rejoin), and
// the fencing's round trips. Without the fencing (it failed, or the leader
// runs an older version) it waits until the broker expires the transaction,
// at most the transaction timeout plus the cleanup interval after the
// transaction began.

// fenceRetries bounds one fencing's InitProducerId retries (txnBackoff: 20
// quick ones, then 200 ms each) to about 8 s, so a plan is not held back
// longer; the takeover then falls back to waiting for the broker.
const fenceRetries = txnQuickRetries + 40

// fencingStrategy is the member's balance strategy with the fencing of dead
// members' transactions before each plan.
type fencingStrategy struct {
	sarama.BalanceStrategy
	fence *fencer
}

// fencing wraps s, keeping the hooks of a strategy that writes its own
// subscription and hears of its assignment (assign.Member).
func fencing(s sarama.BalanceStrategy, f *fencer) sarama.BalanceStrategy {
	fs := &fencingStrategy{BalanceStrategy: s, fence: f}
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
	s.fence.run()
	return s.BalanceStrategy.Plan(members, topics)
}

// fencer finds and fences the group's dead transactional producers.
type fencer struct {
	group string
	name  string // the member's, for the client ID
	cfg   *Config
	log   *slog.Logger
	hooks hookList
}

// fenceVersion is the least Kafka version with ListTransactions (KIP-664).
// The members' clients speak kafkautil.SaramaVersion (2.8) so that older
// brokers serve them; against those the fencing is skipped.
var fenceVersion = sarama.V3_0_0_0

// producerConfig is the member producers' config for transactional ID id,
// with fewer retries.
func (f *fencer) producerConfig(id string) *sarama.Config {
	c := producerConfig(f.cfg, id)
	c.Producer.Transaction.Retry.Max = fenceRetries
	return c
}

// run fences what it finds; it logs and gives up on errors, as the broker's
// own expiry remains the fallback. Its client lives for one plan: plans are
// as rare as rebalances.
func (f *fencer) run() {
	conf := adminConfig(f.cfg, f.name)
	conf.Version = fenceVersion
	client, err := sarama.NewClient(f.cfg.Brokers, conf)
	if err != nil {
		f.log.Warn("could not look for transactions left open by members that left the group; "+
			"their partitions wait for the broker to abort them (transaction timeout)", "err", err)
		return
	}
	defer client.Close()
	dead, err := f.deadTransactions(client)
	if errors.Is(err, sarama.ErrUnsupportedVersion) {
		f.log.Info("the brokers predate Kafka 3.0 (no ListTransactions): a member's transaction left open when it died "+
			"holds its partitions' next owner until the broker aborts it (transaction timeout)", "err", err)
		return
	}
	if err != nil {
		f.log.Warn("could not look for transactions left open by members that left the group; "+
			"their partitions wait for the broker to abort them (transaction timeout)", "err", err)
		return
	}
	for _, id := range dead {
		start := time.Now()
		if err := f.fenceOne(id); err != nil {
			f.log.Warn("could not fence a transaction left open by a member that left the group; "+
				"its partitions wait for the broker to abort it (transaction timeout)", "transactionalId", id, "err", err)
			continue
		}
		f.hooks.DeadTransactionFenced()
		f.log.Info("aborted the open transaction of a member that left the group", "transactionalId", id,
			"took", time.Since(start).Round(time.Millisecond))
	}
}

// deadTransactions are the open transactions of the group's producers whose
// member is not in the group now.
func (f *fencer) deadTransactions(client sarama.Client) ([]string, error) {
	live, err := f.members(client)
	if err != nil {
		return nil, err
	}
	open, err := f.openTransactions(client)
	if err != nil {
		return nil, err
	}
	return deadOf(f.group, live, open), nil
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

// members are the group.instance.ids of the group's members; a member's is
// its producer's transactional ID (processor.go).
func (f *fencer) members(client sarama.Client) ([]string, error) {
	g, err := describeGroup(client, f.group)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, m := range g.Members {
		if m.GroupInstanceId == nil {
			// A dynamic member: its producer's ID cannot be told, so
			// nothing is known to be dead.
			return nil, fmt.Errorf("group %s has a member without an instance ID (%s)", f.group, m.ClientId)
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

// openTransactions lists the ongoing transactions every broker coordinates.
// Brokers return only those the principal may describe; the worker's
// prefixed Write on <group>- covers its group's.
func (f *fencer) openTransactions(client sarama.Client) ([]string, error) {
	conf := client.Config()
	var ids []string
	for _, b := range client.Brokers() {
		if err := b.Open(conf); err != nil && !errors.Is(err, sarama.ErrAlreadyConnected) {
			return nil, fmt.Errorf("connect to broker %s: %w", b.Addr(), err)
		}
		req := sarama.NewListTransactionsRequest(conf.Version)
		req.StateFilters = []string{sarama.TransactionStateOngoing}
		resp, err := b.ListTransactions(req)
		if err != nil {
			return nil, fmt.Errorf("list transactions on broker %s: %w", b.Addr(), err)
		}
		if !errors.Is(resp.ErrorCode, sarama.ErrNoError) {
			return nil, fmt.Errorf("list transactions on broker %s: %w", b.Addr(), resp.ErrorCode)
		}
		for _, t := range resp.TransactionStates {
			ids = append(ids, t.TransactionalID)
		}
	}
	return ids, nil
}

// fenceOne bumps the epoch of transactional ID id: the InitProducerId of a
// new producer with that ID makes its coordinator abort the open
// transaction, and sarama retries it (CONCURRENT_TRANSACTIONS) until the
// abort markers are written.
func (f *fencer) fenceOne(id string) error {
	p, err := sarama.NewAsyncProducer(f.cfg.Brokers, f.producerConfig(id))
	if err != nil {
		return err
	}
	return p.Close()
}

// fenceInstance fences the open transactions of host's members (peers.go:
// its process is gone) and returns how many it fenced.
func (f *fencer) fenceInstance(host string) (int, error) {
	conf := adminConfig(f.cfg, f.name)
	conf.Version = fenceVersion
	client, err := sarama.NewClient(f.cfg.Brokers, conf)
	if err != nil {
		return 0, err
	}
	defer client.Close()
	open, err := f.openTransactions(client)
	if err != nil {
		return 0, err
	}
	fenced := 0
	var errs []error
	for _, id := range open {
		if !kafkautil.InstanceTxnID(host, id) {
			continue
		}
		if err := f.fenceOne(id); err != nil {
			errs = append(errs, fmt.Errorf("fence %s: %w", id, err))
			continue
		}
		fenced++
	}
	return fenced, errors.Join(errs...)
}
