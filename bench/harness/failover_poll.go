package harness

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// tp is one partition of a topic the group consumes.
type tp struct {
	topic string
	part  int32
}

// groupSample is one poll of the group: its state, its members, who owns
// each partition, each partition's committed offset and log end offset.
type groupSample struct {
	at        time.Time
	state     string
	members   []string // sorted member identities
	owner     map[tp]string
	committed map[tp]int64
	end       map[tp]int64
}

// stable reports a group that is Stable with exactly the members want and
// every partition of parts assigned.
func (s *groupSample) stable(want []string, parts []tp) bool {
	if s.state != "Stable" || len(s.members) != len(want) {
		return false
	}
	for i := range want {
		if s.members[i] != want[i] {
			return false
		}
	}
	owns := map[string]int{}
	for _, p := range parts {
		if s.owner[p] == "" {
			return false
		}
		owns[s.owner[p]]++
	}
	// Every member holds at least half its share: a contender that lets a
	// new member warm up before it takes partitions over is stable only
	// once it did, so the hand-over is inside the measurement.
	for _, id := range want {
		if 2*len(want)*owns[id] < len(parts) {
			return false
		}
	}
	return true
}

// memberIdentity is who a member is across restarts: its static instance
// ID when it has one (a restarted static member gets a new member ID), else
// its member ID.
func memberIdentity(id string, m *sarama.GroupMemberDescription) string {
	if m.GroupInstanceId != nil && *m.GroupInstanceId != "" {
		return *m.GroupInstanceId
	}
	return id
}

// poll reads one sample of group. It asks only through the group protocol
// (DescribeConsumerGroups, ListConsumerGroupOffsets, ListOffsets), so it
// works for any contender that is a consumer-protocol group member.
func (a *admin) poll(group string) (*groupSample, error) {
	s := &groupSample{at: time.Now(), owner: map[tp]string{}, committed: map[tp]int64{}, end: map[tp]int64{}}
	descs, err := a.ca.DescribeConsumerGroups([]string{group})
	if err != nil {
		return nil, fmt.Errorf("describe group %s: %w", group, err)
	}
	if len(descs) != 1 {
		return nil, fmt.Errorf("describe group %s: %d descriptions", group, len(descs))
	}
	d := descs[0]
	s.state = d.State
	for id, m := range d.Members {
		who := memberIdentity(id, m)
		s.members = append(s.members, who)
		asg, err := m.GetMemberAssignment()
		if err != nil || asg == nil {
			continue
		}
		for topic, parts := range asg.Topics {
			for _, p := range parts {
				s.owner[tp{topic, p}] = who
			}
		}
	}
	sort.Strings(s.members)
	offs, err := a.ca.ListConsumerGroupOffsets(group, nil)
	if err != nil {
		return nil, fmt.Errorf("group %s offsets: %w", group, err)
	}
	for topic, blocks := range offs.Blocks {
		for p, b := range blocks {
			if b != nil && b.Err == sarama.ErrNoError && b.Offset >= 0 {
				s.committed[tp{topic, p}] = b.Offset
			}
		}
	}
	parts := map[tp]bool{}
	for p := range s.committed {
		parts[p] = true
	}
	for p := range s.owner {
		parts[p] = true
	}
	if err := a.logEnds(parts, s.end); err != nil {
		return nil, err
	}
	return s, nil
}

// logEnds fills ends with the log end offset of every partition, one
// ListOffsets request per leader.
func (a *admin) logEnds(parts map[tp]bool, ends map[tp]int64) error {
	reqs := map[*sarama.Broker]*sarama.OffsetRequest{}
	for p := range parts {
		leader, err := a.client.Leader(p.topic, p.part)
		if err != nil {
			return fmt.Errorf("leader of %s/%d: %w", p.topic, p.part, err)
		}
		req := reqs[leader]
		if req == nil {
			req = &sarama.OffsetRequest{Version: 1}
			reqs[leader] = req
		}
		req.AddBlock(p.topic, p.part, sarama.OffsetNewest, 1)
	}
	for b, req := range reqs {
		resp, err := b.GetAvailableOffsets(req)
		if err != nil {
			return fmt.Errorf("list offsets: %w", err)
		}
		for topic, blocks := range resp.Blocks {
			for p, blk := range blocks {
				if blk.Err == sarama.ErrNoError {
					ends[tp{topic, p}] = blk.Offset
				}
			}
		}
	}
	return nil
}

// poller samples a group every interval until stopped; its goroutine is
// owned by whoever called startPoller and ends in stop.
type poller struct {
	mu      sync.Mutex
	samples []*groupSample
	errs    int
	lastErr error
	notify  chan struct{} // gets a value after each sample (never blocks)
	quit    chan struct{}
	done    chan struct{}
}

func startPoller(a *admin, group string, interval time.Duration) *poller {
	p := &poller{notify: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			s, err := a.poll(group)
			p.mu.Lock()
			if err != nil {
				p.errs++
				p.lastErr = err
			} else {
				p.samples = append(p.samples, s)
			}
			p.mu.Unlock()
			select {
			case p.notify <- struct{}{}:
			default:
			}
			select {
			case <-p.quit:
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

func (p *poller) stop() {
	select {
	case <-p.quit:
	default:
		close(p.quit)
	}
	<-p.done
}

// since returns the samples taken at or after t (and the last one before
// it, the state at t, first), a copy safe to read.
func (p *poller) since(t time.Time) []*groupSample {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := sort.Search(len(p.samples), func(i int) bool { return !p.samples[i].at.Before(t) })
	return append([]*groupSample(nil), p.samples[max(0, i-1):]...)
}

// latest is the newest sample, nil before the first.
func (p *poller) latest() *groupSample {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.samples) == 0 {
		return nil
	}
	return p.samples[len(p.samples)-1]
}
