package processor

import (
	"context"
	"errors"
	"fmt"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup/internal/kafkautil"
)

// LeaveGroupOnStop asks that the stop ending Run be a stop for good: once
// every member has committed and closed, the instance's static members are
// removed from the group, so the other instances take their partitions at
// once instead of after the session timeout. Call it before cancelling
// Run's context (a scale-in); a stop without it is a restart, which static
// membership serves best. Config.Group.LeaveOnStop does the same for every
// stop. Safe to call from any goroutine.
func (p *Processor) LeaveGroupOnStop() { p.leave.Store(true) }

// leaveGroup removes every member of this instance from the group in one
// LeaveGroup request (KIP-345, by group.instance.id). sarama never sends
// LeaveGroup for a static member when it closes, so without it the
// coordinator keeps the members, and their partitions unassigned, until
// the session timeout. It is given the session timeout too: past it the
// coordinator has removed the members anyway. A failure is logged, not
// returned: the stop was clean, only the hand-over waits longer.
func (p *Processor) leaveGroup(ctx context.Context) {
	names := make([]string, len(p.members))
	for i, m := range p.members {
		names[i] = m.memberName
	}
	log := p.cfg.Logger.With("group", p.topo.Group, "members", names)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.Group.SessionTimeout)
	defer cancel()
	sc := adminConfig(&p.cfg, "dedup-admin")
	var resp *sarama.LeaveGroupResponse
	err := kafkautil.WithAdmin(ctx, log, "leave the group", p.cfg.Brokers, sc, p.cfg.Group.SessionTimeout,
		func(admin sarama.ClusterAdmin) error {
			var err error
			resp, err = admin.RemoveMemberFromConsumerGroup(p.topo.Group, names)
			return err
		})
	if err == nil {
		err = memberErrors(resp)
	}
	if err != nil {
		log.Warn("leaving the consumer group failed: the other instances get this instance's partitions "+
			"after the session timeout", "sessionTimeout", p.cfg.Group.SessionTimeout, "err", kafkautil.Named(err))
		return
	}
	log.Info("left the consumer group: the other instances take this instance's partitions now")
}

// memberErrors is the answer's per-member errors. UNKNOWN_MEMBER_ID is not
// one: that member is not in the group (it never joined, or the coordinator
// removed it already), which is what leaving wants.
func memberErrors(resp *sarama.LeaveGroupResponse) error {
	var errs []error
	for _, m := range resp.Members {
		if m.Err == sarama.ErrNoError || m.Err == sarama.ErrUnknownMemberId {
			continue
		}
		name := m.MemberId
		if m.GroupInstanceId != nil {
			name = *m.GroupInstanceId
		}
		errs = append(errs, fmt.Errorf("member %s: %w", name, m.Err))
	}
	return errors.Join(errs...)
}
