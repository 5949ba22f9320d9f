package processor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/assign"
	"github.com/dedupkit/dedup/internal/faults"
	"github.com/dedupkit/dedup/internal/kafkautil"
	"github.com/dedupkit/dedup/internal/metrics"
)

// Processor runs a topology exactly-once with Config.Threads members.
type Processor struct {
	cfg  Config
	topo *dedup.Topology
	// members is fixed once New returned: Health and Lookup read it from
	// HTTP handlers while Run starts and closes them.
	members    []*member
	partitions int32 // of the inputs, the table and the loop
	closed     bool  // by close; only New and Run call it, one after the other
	// leave is set by LeaveGroupOnStop: this stop leaves the group.
	leave atomic.Bool
	// stuck fences other instances' transactions that stay open past
	// Config.Transactions.FenceStuckAfter (stuck.go); nil: never.
	stuck *stuckWatch
	// host is the instance's name in the group (<group>-<instance>).
	host string
	// peers watches the other instances' liveness connections and fences
	// the transactions of those that die (peers.go); nil: Config.Peers.Addr
	// is empty.
	peers *peerWatch
}

// New validates, creates the topics the topology writes (the inputs must
// exist, with one partition count) and prepares the members. Nothing is consumed until Run. ctx ends
// the wait for an unreachable cluster (up to kafkautil.StartupTimeout), so a
// SIGTERM during startup is honoured at once. Errors name Kafka's error
// codes (kafkautil.Named).
func New(ctx context.Context, cfg Config, topo *dedup.Topology) (*Processor, error) {
	p, err := newProcessor(ctx, cfg, topo)
	return p, kafkautil.Named(err)
}

func newProcessor(ctx context.Context, cfg Config, topo *dedup.Topology) (*Processor, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := topo.Validate(); err != nil {
		return nil, err
	}
	cfg.Transactions.FenceStuckAfter = stuckBound(cfg.Transactions.CommitInterval, cfg.Transactions.FenceStuckAfter)
	if floor := stuckFloor(cfg.Transactions.CommitInterval); cfg.Transactions.FenceStuckAfter <= floor {
		return nil, fmt.Errorf("fence stuck after %v: must exceed the commit interval (%v), "+
			"how long a live member's transaction may stay open", cfg.Transactions.FenceStuckAfter, floor)
	}
	// The runtime's logger and metrics reach the topology through a copy:
	// the caller's definition stays as it was.
	run := *topo
	if run.Logger == nil {
		run.Logger = cfg.Logger
	}
	hooks := hookList(slices.Clone(cfg.Hooks))
	if cfg.Registerer != nil {
		m := metrics.New(cfg.Registerer, topo.Group)
		hooks = append(hooks, metrics.NewRuntime(cfg.Registerer, m, topo.Group))
		run.Hooks = append(slices.Clone(topo.Hooks), m)
	}
	topo = &run
	// The caller's slice may change after New; the instance keeps its own.
	cfg.Peers.Secret = bytes.Clone(cfg.Peers.Secret)
	instance := cfg.InstanceID
	if instance == "" {
		var err error
		if instance, err = instanceID(cfg.StateDir); err != nil {
			return nil, fmt.Errorf("instance id in %s: %w", cfg.StateDir, err)
		}
	}
	// Validated above: Load fails only on a file that vanished since.
	cfg.internal.beforeCommit = faults.BeforeCommit(ctx)
	cfg.internal.afterResources = faults.AfterResources(ctx)
	cfg.internal.afterCommit = faults.AfterCommit(ctx)
	secure, err := cfg.Security.load()
	if err != nil {
		return nil, err
	}
	cfg.internal.secure = secure
	partitions, maxRecord, unread, err := prepareTopics(ctx, &cfg, topo)
	if err != nil {
		return nil, err
	}
	cfg.internal.maxRecord = maxRecord
	if len(unread) > 0 {
		cfg.Logger.Warn("no DescribeConfigs on these topics: records larger than their max.message.bytes would abort "+
			"every transaction that holds them; grant DescribeConfigs so they are dead-lettered instead", "topics", unread)
	}
	host := fmt.Sprintf("%s-%s", topo.Group, instance) // the instance's name in the group
	p := &Processor{cfg: cfg, topo: topo, partitions: partitions, host: host}
	// The members' plans, the stuck watch and the peer watch each choose
	// other instances' transactions to abort; one aborter aborts them all.
	aborts := newAborter(topo.Group, host, &p.cfg, hooks)
	if cfg.Transactions.FenceStuckAfter < cfg.Transactions.Timeout {
		// At the transaction timeout or beyond, the coordinator aborts a
		// stuck transaction first.
		p.stuck = newStuckWatch(aborts, cfg.Logger.With("component", "stuck-transactions"), topo.LoopTopic(), cfg.Transactions.FenceStuckAfter)
	}
	if cfg.Peers.Addr != "" {
		p.peers = newPeerWatch(aborts, cfg.Logger.With("component", "peers"), host, p.cfg.Peers.Secret,
			peerPort(cfg.Peers.Addr, cfg.Peers.Advertise))
	}
	kept, scans := &keptStores{}, newScanPacer()
	var standby *standbyTasks
	if cfg.Group.StandbyReplicas > 0 {
		standby = newStandbyTasks()
	}
	for t := 0; t < cfg.Threads; t++ {
		name := fmt.Sprintf("%s-%s-%d", topo.Group, instance, t)
		m := &member{cfg: &p.cfg, topo: topo, hooks: hooks, memberName: name,
			tableTopic: topo.TableTopic(), loopTopic: topo.LoopTopic(), partitions: partitions,
			bg:  background{kept: kept, scans: scans, standby: standby, stuck: p.stuck, peers: p.peers},
			log: cfg.Logger.With("member", name), tx: transaction{producerCfg: producerConfig(&cfg, name), maxRecord: cfg.internal.maxRecord}}
		if err := m.connect(host, aborts); err != nil {
			p.close()
			return nil, err
		}
		p.members = append(p.members, m)
	}
	if cfg.Registerer != nil {
		metrics.RegisterHealth(cfg.Registerer, topo.Group, p.httpHealth)
	}
	return p, nil
}

// prepareTopics checks the inputs, creates the topics the topology
// writes and reads their record limit (recordLimit), returning the inputs'
// partition count. One admin client serves it all: a restarted worker
// waits on these requests before it rejoins. A broker that is down, a
// leader election or a controller that moved is waited out
// (kafkautil.WithAdmin, up to kafkautil.StartupTimeout); a missing input
// topic, a rejected topic config, inputs of different partition counts or
// an existing table or loop topic that does not fit the group
// (kafkautil.ErrTopicMismatch) fail at once.
func prepareTopics(ctx context.Context, cfg *Config, topo *dedup.Topology) (parts int32, limit int, unread []string, err error) {
	sc := adminConfig(cfg, "dedup-admin")
	err = kafkautil.WithAdmin(ctx, cfg.Logger, "prepare topics", cfg.Brokers, sc,
		kafkautil.StartupTimeout, func(admin sarama.ClusterAdmin) error {
			var err error
			parts, err = kafkautil.EnsureGroupTopics(admin, kafkautil.GroupTopics{Inputs: topo.Inputs, Outputs: topo.Outputs,
				DLQ: topo.DLQ, Table: topo.TableTopic(), Loop: topo.LoopTopic(), Group: topo.Group, Brokers: cfg.Brokers},
				cfg.Replication)
			if err != nil {
				return err
			}
			if err := kafkautil.CheckGroup(admin, topo.Group); err != nil {
				return err
			}
			// EnsureGroupTopics has just made every topic asked here, so
			// one the broker does not know was created a moment ago.
			limit, unread, err = readRecordLimit(admin, topo)
			return kafkautil.NotVisibleYet(err)
		})
	if err == nil {
		err = checkRecordLimit(limit)
	}
	return parts, limit, unread, err
}

// defaultMaxRecord is sarama's Producer.MaxMessageBytes, the limit when
// no topic has a smaller max.message.bytes.
const defaultMaxRecord = 1_000_000

// recordLimit is the largest record the member's producer sends: sarama's
// default, or less when a topic the topology writes takes smaller batches.
// The producer builds batches up to Producer.MaxMessageBytes for every topic
// alike (internal/txnproducer counts as sarama does), and a batch a topic
// refuses aborts every transaction that holds it,
// so the limit must fit the smallest topic. The topology dead-letters an
// event whose records would not fit (txnContext.MaxRecordBytes). unread are
// the topics whose limit the worker may not read (no DescribeConfigs).
func recordLimit(ctx context.Context, cfg *Config, topo *dedup.Topology) (limit int, unread []string, err error) {
	sc := adminConfig(cfg, "dedup-admin")
	err = kafkautil.WithAdmin(ctx, cfg.Logger, "read max.message.bytes", cfg.Brokers, sc,
		kafkautil.StartupTimeout, func(admin sarama.ClusterAdmin) error {
			var err error
			limit, unread, err = readRecordLimit(admin, topo)
			return err
		})
	if err == nil {
		err = checkRecordLimit(limit)
	}
	return limit, unread, err
}

// readRecordLimit is recordLimit on an admin client the caller holds.
func readRecordLimit(admin sarama.ClusterAdmin, topo *dedup.Topology) (limit int, unread []string, err error) {
	topics := append([]string{topo.DLQ, topo.TableTopic(), topo.LoopTopic()}, topo.Outputs...)
	smallest, unread, err := kafkautil.MaxMessageBytes(admin, topics...)
	if err != nil {
		return 0, nil, err
	}
	limit = defaultMaxRecord
	if smallest > 0 && smallest-kafkautil.BatchOverhead < limit {
		limit = smallest - kafkautil.BatchOverhead
	}
	return limit, unread, nil
}

// checkRecordLimit fails when limit leaves no room for a record.
func checkRecordLimit(limit int) error {
	if limit < 1024 {
		return fmt.Errorf("max.message.bytes %d of a topic the worker writes leaves no room for a record", limit+kafkautil.BatchOverhead)
	}
	return nil
}

// hashPartition is sarama's hash partitioner (FNV-1a, its sign dropped the
// way sarama drops it) without its allocations: it runs for every re-keyed
// event. It must agree with sarama's, which goka's (best-effort) processor
// loops records with: a group run in either mode finds its keys where the
// other put them.
func hashPartition(key string, partitions int32) int32 {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	part := int32(h) % partitions
	if part < 0 {
		part = -part
	}
	return part
}

// connect creates the member's restore client and group member, whose
// plans abort through aborts.
func (m *member) connect(host string, aborts *aborter) error {
	var err error
	if m.client, err = sarama.NewClient(m.cfg.Brokers, baseConfig(m.cfg, m.memberName)); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	cc := consumerConfig(m.cfg, m.memberName)
	if m.bg.standby != nil {
		// This member's own instance of the sticky strategy: it reports
		// the standbys the member holds and hears which to hold.
		// With re-keying, a member can forward what it would judge in a
		// table it does not hold, so a member warming a table up takes
		// its inputs at once (internal/assign's input-first plan).
		forwardTo := ""
		if m.topo.Rekey != dedup.RekeyNever {
			forwardTo = m.loopTopic
		}
		m.bg.strategy = assign.NewMember(host, m.cfg.Group.StandbyReplicas, func() ([]int32, []int32) { return m.bg.standby.held(m) }, forwardTo)
		cc.Consumer.Group.Rebalance.GroupStrategies[0] = m.bg.strategy
	} else if m.bg.peers != nil {
		// The sticky strategy with the liveness address in the
		// subscription (Processor.listenPeers).
		m.bg.strategy = assign.NewMember(host, 0, nil, "")
		cc.Consumer.Group.Rebalance.GroupStrategies[0] = m.bg.strategy
	}
	// When this member leads the group, it aborts the transactions of
	// members that left it before it hands out their partitions (fence.go).
	for i, s := range cc.Consumer.Group.Rebalance.GroupStrategies {
		cc.Consumer.Group.Rebalance.GroupStrategies[i] = fencing(s, aborts, m.log)
	}
	if m.group, err = sarama.NewConsumerGroup(m.cfg.Brokers, m.topo.Group, cc); err != nil {
		m.client.Close()
		return fmt.Errorf("consumer group %s: %w", m.topo.Group, err)
	}
	return nil
}

// Run processes until ctx is cancelled (then it commits and closes cleanly)
// or a member fails fatally, which stops the others. A clean stop with
// Config.Group.LeaveOnStop or LeaveGroupOnStop removes the instance's
// members from the group once they closed. An error names Kafka's error
// codes (PRODUCER_FENCED, ...).
func (p *Processor) Run(ctx context.Context) error {
	err := p.run(ctx)
	// Only a clean stop leaves: after a failure the instance is likely
	// restarted, and after ErrInstanceFenced the members of that name
	// belong to the other live instance.
	if err == nil && ctx.Err() != nil && (p.cfg.Group.LeaveOnStop || p.leave.Load()) {
		p.leaveGroup(ctx)
	}
	return err
}

func (p *Processor) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer p.close()
	errs := make([]error, len(p.members))
	var wg sync.WaitGroup
	if p.peers != nil {
		srv, err := p.listenPeers()
		if err != nil {
			return err
		}
		// After every member ended: its transactions are committed or
		// aborted when the others find the address refusing.
		defer srv.close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.peers.run(ctx)
		}()
	}
	// The stores the members had open before a restart open while their
	// producers start and they join (preopen.go).
	p.startPreopen()
	if p.stuck != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.stuck.run(ctx)
		}()
	}
	for i, m := range p.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A refused fetch (no READ on the input, say) reaches only the
			// group's error channel: it stops the member like a shutdown
			// (what it holds is committed) and is then its error.
			mctx, refuse := context.WithCancelCause(ctx)
			defer refuse(nil)
			go m.drainGroupErrors(refuse)
			errs[i] = m.run(mctx)
			if errs[i] == nil && ctx.Err() == nil {
				errs[i] = context.Cause(mctx)
			}
			if errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	return kafkautil.Named(errors.Join(errs...))
}

// listenPeers listens for the other instances' liveness connections and
// has the members advertise the address (peers.go). An address no peer
// could dial is a warning, not a failure: the stuck watch remains.
func (p *Processor) listenPeers() (*peerServer, error) {
	me := peerIdentity{group: p.topo.Group, host: p.host, incarnation: newIncarnation()}
	srv, err := listenPeers(p.cfg.Peers.Addr, me, p.cfg.Peers.Secret, p.peers.log)
	if err != nil {
		return nil, err
	}
	addr, err := advertisedPeer(p.cfg.Peers.Addr, p.cfg.Peers.Advertise, srv.port(), p.cfg.Brokers)
	if err != nil {
		p.peers.log.Warn("no liveness address to advertise: the other instances notice this one's death after "+
			"--fence-stuck-after", "err", err)
		return srv, nil
	}
	for _, m := range p.members {
		m.bg.strategy.Advertise(addr)
	}
	p.peers.log.Info("listening for the liveness connections of the group's other instances", "addr", addr)
	return srv, nil
}

// Ready reports whether every member has its partitions restored and can
// commit (Health).
func (p *Processor) Ready() bool { return p.Health().Ready }

// Live reports whether no member has held consumed records uncommitted for
// Config.Health.LiveStallAfter (Health).
func (p *Processor) Live() bool { return p.Health().Live }

// Health reports readiness and liveness with the reasons.
func (p *Processor) Health() Health {
	now := time.Now()
	states := make([]memberState, len(p.members))
	for i, m := range p.members {
		states[i] = memberState{restored: m.session.ready.Load(), healthSnapshot: m.health.snapshot(now)}
	}
	return judge(now, p.cfg.healthLimits(), states)
}

func (p *Processor) close() {
	if p.closed {
		return
	}
	p.closed = true
	for _, m := range p.members {
		m.group.Close()
		m.client.Close()
	}
}

// drainGroupErrors logs the group's asynchronous errors, and stops the
// member with refuse on one that no retry fixes (kafkautil.Refused: sarama's
// consumer would fetch again every retry backoff, forever); it ends when the
// group is closed.
func (m *member) drainGroupErrors(refuse context.CancelCauseFunc) {
	for err := range m.group.Errors() {
		if kafkautil.Refused(err) {
			m.log.Error("consumer group refused, stopping", "err", err)
			refuse(fmt.Errorf("group %s: %w", m.topo.Group, err))
			continue
		}
		m.log.Warn("consumer group", "err", err)
	}
}

func baseConfig(cfg *Config, clientID string) *sarama.Config {
	c := sarama.NewConfig()
	c.Version = kafkautil.SaramaVersion
	c.ClientID = clientID
	if cfg.internal.secure != nil {
		cfg.internal.secure(c)
	}
	// Pending transactional offsets make a joining member's offset fetch fail
	// with UNSTABLE_OFFSET_COMMIT until the transaction ends; sarama retries
	// only Metadata.Retry.Max times, so give it room for a transaction timeout.
	c.Metadata.Retry.Max = 100
	c.Metadata.Retry.Backoff = 200 * time.Millisecond
	return c
}

// adminConfig is baseConfig for the short admin conversations (topics,
// limits, leaving the group, fencing): their callers retry and log each
// retry, and baseConfig's 100 metadata retries (meant for group joins)
// would spend 20 s silently in every attempt while no broker answers.
func adminConfig(cfg *Config, clientID string) *sarama.Config {
	c := baseConfig(cfg, clientID)
	c.Metadata.Retry.Max = 3
	return c
}

func consumerConfig(cfg *Config, name string) *sarama.Config {
	c := baseConfig(cfg, name)
	c.Consumer.Offsets.AutoCommit.Enable = false
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.IsolationLevel = sarama.ReadCommitted
	c.Consumer.Return.Errors = true
	// The sticky strategy keeps each member's partitions, up to its share,
	// across a rebalance, so a member joining or leaving restores only the
	// tables that move.
	c.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{assign.Sticky}
	c.Consumer.Group.Session.Timeout = cfg.Group.SessionTimeout
	c.Consumer.Group.Heartbeat.Interval = heartbeatInterval(cfg.Group.SessionTimeout)
	// Static membership: a restarted instance gets its partitions back at
	// once instead of after a rebalance.
	c.Consumer.Group.InstanceId = name
	return c
}

// maxHeartbeat bounds the heartbeat interval. Under the eager protocol a
// rebalance waits until every member has heard of it, at its next
// heartbeat, and has rejoined; the members that heard first stand still
// meanwhile. So the interval adds to the pause of every scale-in and
// takeover, and twice to a join with standby replicas (the join, then the
// hand-over once the new member warmed up), where sarama's usual third of
// the session timeout would add seconds. A quarter of a second costs the
// coordinator four small requests a second per member.
const maxHeartbeat = 250 * time.Millisecond

// heartbeatInterval is a fifth of the session timeout, at most maxHeartbeat.
func heartbeatInterval(session time.Duration) time.Duration {
	return min(session/5, maxHeartbeat)
}

func producerConfig(cfg *Config, name string) *sarama.Config {
	c := baseConfig(cfg, name)
	c.Producer.Idempotent = true
	c.Producer.Transaction.ID = name
	c.Producer.Transaction.Timeout = cfg.Transactions.Timeout
	// InitProducerId answers CONCURRENT_TRANSACTIONS while the broker aborts
	// the previous incarnation's transaction: keep retrying through it.
	c.Producer.Transaction.Retry.Max = txnRetries
	c.Producer.Transaction.Retry.BackoffFunc = txnBackoff
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Return.Successes = true
	c.Producer.Return.Errors = true
	c.Producer.Partitioner = newPartitioner
	if cfg.internal.maxRecord > 0 {
		c.Producer.MaxMessageBytes = cfg.internal.maxRecord
	}
	c.Producer.Flush.Messages = 1000
	c.Producer.Flush.Frequency = 5 * time.Millisecond
	c.Net.MaxOpenRequests = 1
	return c
}

// txnBackoff is 5, 10, then 20 ms for the first txnQuickRetries retries,
// then 200 ms. The first record after a commit adds its partitions to the
// next transaction while the coordinator is still writing the last one's
// markers, which answers CONCURRENT_TRANSACTIONS, usually for a few
// milliseconds and sometimes for a few hundred. The wait past the moment the
// markers are written is added to every event of the transaction, so it must
// stay short: a flat 100 ms backoff would make it most of an event's latency
// (KAFKA-5482), and a doubling one overshoots the end of a slow marker write
// by up to its last wait, which shows in the latency's tail. The Java
// client retries this case after 20 ms. After txnQuickRetries the error is
// more likely a coordinator that moved or a broker that died, where 200 ms
// spares the recovering cluster; txnRetries keeps the whole budget about
// 20 s.
func txnBackoff(retries, _ int) time.Duration {
	if retries < txnQuickRetries {
		return min(5*time.Millisecond<<retries, 20*time.Millisecond)
	}
	return 200 * time.Millisecond
}

const (
	txnQuickRetries = 20
	txnRetries      = 120
)

// partitioner sends changelog and loop records to the partition the runtime
// chose and everything else by key hash (goka's and sarama's FNV-1a).
type partitioner struct{ hash sarama.Partitioner }

func newPartitioner(topic string) sarama.Partitioner {
	return partitioner{hash: sarama.NewHashPartitioner(topic)}
}

func (p partitioner) Partition(msg *sarama.ProducerMessage, n int32) (int32, error) {
	if _, ok := msg.Metadata.(manualPartition); ok {
		return msg.Partition, nil
	}
	return p.hash.Partition(msg, n)
}

func (p partitioner) RequiresConsistency() bool { return true }

// sleep waits d or until ctx is done; false when ctx is done.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
