package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/kafkautil"
)

// Another instance's transaction left open holds the partitions it wrote
// until it ends, and three things tell an instance that one will not end by
// itself: the group's plan (fence.go: its member is no longer in the
// group), the peer watch (peerwatch.go: its process is gone) and the stuck
// watch (stuck.go: it stayed open past Config.Transactions.FenceStuckAfter). Each of
// them only chooses which transactional IDs to abort; they all read the
// group's open transactions and abort the chosen ones through the
// Processor's one aborter, so an abort is made, counted and logged the same
// way whatever noticed the need for it.

// trigger is what chose the transactional IDs an abort fences.
type trigger int

const (
	triggerPlan  trigger = iota // their members are no longer in the group (fence.go)
	triggerStuck                // they stayed open past the bound (stuck.go)
	triggerPeer                 // their instance's process is gone (peerwatch.go)
)

// abortReport is how an abort tells of its trigger's IDs: operators know
// these lines and hooks, so each trigger keeps its own.
type abortReport struct {
	failed string              // warned per ID not fenced ("": the error is only returned)
	done   string              // logged per ID fenced, at level ("": not logged)
	level  slog.Level          // of done
	each   func(hookList)      // told per ID fenced
	all    func(hookList, int) // told once, with how many were fenced
}

var abortReports = [...]abortReport{
	triggerPlan: {
		failed: "could not fence a transaction left open by a member that left the group; " +
			"its partitions wait for the broker to abort it (transaction timeout)",
		done:  "aborted the open transaction of a member that left the group",
		level: slog.LevelInfo,
		each:  hookList.DeadTransactionFenced,
	},
	triggerStuck: {
		failed: "could not fence a stuck transaction",
		done: "aborted a transaction of this group that stayed open longer than --fence-stuck-after: " +
			"its instance is dead or stalled, and it held the partitions it wrote",
		level: slog.LevelWarn,
		each:  hookList.StuckTransactionFenced,
	},
	// The peer watch logs one line for the instance (peerWatch.dead).
	triggerPeer: {all: hookList.InstanceDied},
}

// fenceRetries bounds one fencing's InitProducerId retries (txnBackoff: 20
// quick ones, then 200 ms each) to about 8 s, so that a plan is not held
// back longer; the takeover then falls back to waiting for the broker.
const fenceRetries = txnQuickRetries + 40

// fenceVersion is the least Kafka version with ListTransactions (KIP-664).
// The members' clients speak kafkautil.SaramaVersion (2.8) so that older
// brokers serve them; against those nothing is aborted here.
var fenceVersion = sarama.V3_0_0_0

// aborter reads the group's open transactions and aborts those a trigger
// chose. The Processor has one, shared by its members' plans, its stuck
// watch and its peer watch.
type aborter struct {
	group string
	name  string // the instance's (<group>-<instance>), for its clients' ID
	cfg   *Config
	hooks hookList

	// The broker calls, which tests replace: connect (dial), list
	// (listOpen), members (groupMembers) and fence (fenceOne).
	connect func() (sarama.Client, error)
	list    func(client sarama.Client) (ids []string, partial, err error)
	members func(client sarama.Client) ([]string, error)
	fence   func(id string) error
}

// newAborter is the aborter of instance name (<group>-<instance>) in group.
func newAborter(group, name string, cfg *Config, hooks hookList) *aborter {
	a := &aborter{group: group, name: name, cfg: cfg, hooks: hooks}
	a.connect, a.list, a.fence = a.dial, a.listOpen, a.fenceOne
	a.members = func(client sarama.Client) ([]string, error) { return groupMembers(client, group) }
	return a
}

// dial makes a client that speaks fenceVersion, for ListTransactions.
func (a *aborter) dial() (sarama.Client, error) {
	conf := adminConfig(a.cfg, a.name)
	conf.Version = fenceVersion
	return sarama.NewClient(a.cfg.Brokers, conf)
}

// listOpen lists the group's ongoing transactions, each ID once, sorted:
// those of its members' shape (kafkautil.MemberTxnID) that any broker
// coordinates. Brokers return only those the principal may describe; the
// worker's prefixed Write on <group>- covers its group's. When some brokers
// fail it goes on with the others' (a transaction that one coordinates is
// then not seen) and returns partial for the log; err is that none
// answered.
func (a *aborter) listOpen(client sarama.Client) (ids []string, partial, err error) {
	conf := client.Config()
	brokers := client.Brokers()
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		errs     []error
		answered bool
	)
	for _, b := range brokers {
		wg.Go(func() {
			got, err := listBroker(b, conf)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			answered = true
			for _, id := range got {
				if kafkautil.MemberTxnID(a.group, id) {
					ids = append(ids, id)
				}
			}
		})
	}
	wg.Wait()
	if !answered && len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	slices.Sort(ids)
	return slices.Compact(ids), errors.Join(errs...), nil
}

// listBroker lists the ongoing transactions b coordinates.
func listBroker(b *sarama.Broker, conf *sarama.Config) ([]string, error) {
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
	ids := make([]string, 0, len(resp.TransactionStates))
	for _, t := range resp.TransactionStates {
		ids = append(ids, t.TransactionalID)
	}
	return ids, nil
}

// abort fences each of ids for trigger t, and tells t's hooks and log of
// each (attrs go with the line of each ID fenced). It returns how many it
// fenced and why the others were not; a failed fencing is left to the
// broker's expiry or the next trigger.
func (a *aborter) abort(log *slog.Logger, t trigger, ids []string, attrs ...any) (fenced int, err error) {
	report := abortReports[t]
	var errs []error
	for _, id := range ids {
		start := time.Now()
		if err := a.fence(id); err != nil {
			errs = append(errs, fmt.Errorf("fence %s: %w", id, err))
			if report.failed != "" {
				log.Warn(report.failed, "transactionalId", id, "err", err)
			}
			continue
		}
		fenced++
		if report.each != nil {
			report.each(a.hooks)
		}
		if report.done != "" {
			args := append(append([]any{"transactionalId", id}, attrs...), "took", time.Since(start).Round(time.Millisecond))
			log.Log(context.Background(), report.level, report.done, args...)
		}
	}
	if report.all != nil {
		report.all(a.hooks, fenced)
	}
	return fenced, errors.Join(errs...)
}

// producerConfig is the member producers' config for transactional ID id,
// with fewer retries.
func (a *aborter) producerConfig(id string) *sarama.Config {
	c := producerConfig(a.cfg, id)
	c.Producer.Transaction.Retry.Max = fenceRetries
	return c
}

// fenceOne bumps the epoch of transactional ID id: the InitProducerId of a
// new producer with that ID makes its coordinator abort the open
// transaction, and sarama retries it (CONCURRENT_TRANSACTIONS) until the
// abort markers are written.
func (a *aborter) fenceOne(id string) error {
	p, err := sarama.NewAsyncProducer(a.cfg.Brokers, a.producerConfig(id))
	if err != nil {
		return err
	}
	return p.Close()
}
