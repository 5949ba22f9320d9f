package processor

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// fakeCluster stands for the brokers behind an aborter: what they list,
// who is in the group, which fencings fail, and which IDs were fenced.
type fakeCluster struct {
	open     []string         // listed, as the aborter's list returns them
	partial  error            // some brokers did not answer
	listErr  error            // none answered
	live     []string         // the group's members
	refuse   string           // the one ID whose fencing fails
	starts   map[string]int64 // DescribeTransactions: their start times
	fenced   []string
	describe int // DescribeTransactions calls
}

func (k *fakeCluster) aborter(hooks hookList) *aborter {
	a := newAborter("g", "g-me", nil, hooks)
	a.connect = func() (sarama.Client, error) { return fakeClient{}, nil }
	a.list = func(sarama.Client) ([]string, error, error) { return k.open, k.partial, k.listErr }
	a.members = func(sarama.Client) ([]string, error) { return k.live, nil }
	a.fence = func(id string) error {
		if id == k.refuse {
			return errors.New("refused")
		}
		k.fenced = append(k.fenced, id)
		return nil
	}
	return a
}

// fakeClient is a client that knows one transaction coordinator and closes.
type fakeClient struct{ sarama.Client }

func (fakeClient) Close() error { return nil }

func (fakeClient) TransactionCoordinator(string) (*sarama.Broker, error) {
	return sarama.NewBroker("127.0.0.1:1"), nil
}

// fakeAdmin describes k's open transactions as ongoing since their starts.
type fakeAdmin struct {
	sarama.TransactionClusterAdmin
	k *fakeCluster
}

func (a fakeAdmin) DescribeTransactions(ids []string) (map[string]sarama.TransactionState, error) {
	a.k.describe++
	states := map[string]sarama.TransactionState{}
	for _, id := range ids {
		states[id] = sarama.TransactionState{TransactionalID: id, TransactionState: sarama.TransactionStateOngoing,
			ProducerID: 1, TransactionStartTime: a.k.starts[id]}
	}
	return states, nil
}

// abortHooks counts what the aborts tell.
type abortHooks struct {
	mu           sync.Mutex
	dead, stuck  int
	instanceDied []int
}

func (h *abortHooks) OnDeadTransactionFenced()  { h.mu.Lock(); h.dead++; h.mu.Unlock() }
func (h *abortHooks) OnStuckTransactionFenced() { h.mu.Lock(); h.stuck++; h.mu.Unlock() }
func (h *abortHooks) OnInstanceDied(n int) {
	h.mu.Lock()
	h.instanceDied = append(h.instanceDied, n)
	h.mu.Unlock()
}

// Each trigger chooses its IDs from the same listing and aborts them on the
// one path: exactly the right IDs are fenced, and only the trigger's own
// hook is told, once per ID fenced (the plan's and the stuck watch's) or
// once with the number (a dead peer's).
func TestAbortTriggers(t *testing.T) {
	lost := errors.New("broker 2 did not answer")
	tests := []struct {
		name    string
		trigger trigger
		host    string // triggerPeer: the instance that died
		k       fakeCluster
		fenced  []string
		dead    int
		stuck   int
		died    []int
	}{
		{name: "plan: the members no longer in the group", trigger: triggerPlan,
			k:      fakeCluster{open: []string{"g-b-0", "g-c-0", "g-c-1", "g-me-0"}, live: []string{"g-me-0", "g-b-0"}},
			fenced: []string{"g-c-0", "g-c-1"}, dead: 2},
		{name: "plan: a fencing that fails is not told", trigger: triggerPlan,
			k:      fakeCluster{open: []string{"g-c-0", "g-c-1"}, live: []string{"g-me-0"}, refuse: "g-c-0"},
			fenced: []string{"g-c-1"}, dead: 1},
		{name: "plan: with a broker silent, what the others listed", trigger: triggerPlan,
			k:      fakeCluster{open: []string{"g-c-0"}, partial: lost, live: []string{"g-me-0"}},
			fenced: []string{"g-c-0"}, dead: 1},
		{name: "plan: nothing listed, nothing fenced", trigger: triggerPlan,
			k: fakeCluster{listErr: lost, live: []string{"g-me-0"}}},
		{name: "plan: brokers before Kafka 3.0", trigger: triggerPlan,
			k: fakeCluster{listErr: fmt.Errorf("list: %w", sarama.ErrUnsupportedVersion), live: []string{"g-me-0"}}},
		{name: "plan: every member live", trigger: triggerPlan,
			k: fakeCluster{open: []string{"g-me-0", "g-b-0"}, live: []string{"g-me-0", "g-b-0"}}},

		{name: "peer: all of the dead instance's, no other's", trigger: triggerPeer, host: "g-c",
			k:      fakeCluster{open: []string{"g-b-0", "g-c-0", "g-c-1", "g-c-10", "g-c-x-0", "g-me-0"}, live: []string{"g-c-0"}},
			fenced: []string{"g-c-0", "g-c-1", "g-c-10"}, died: []int{3}},
		{name: "peer: a fencing that fails is not counted", trigger: triggerPeer, host: "g-c",
			k:      fakeCluster{open: []string{"g-c-0", "g-c-1"}, refuse: "g-c-1"},
			fenced: []string{"g-c-0"}, died: []int{1}},
		{name: "peer: with a broker silent, what the others listed", trigger: triggerPeer, host: "g-c",
			k:      fakeCluster{open: []string{"g-c-1"}, partial: lost},
			fenced: []string{"g-c-1"}, died: []int{1}},
		{name: "peer: nothing listed is a death with nothing fenced", trigger: triggerPeer, host: "g-c",
			k: fakeCluster{listErr: lost}, died: []int{0}},
		{name: "peer: died between transactions", trigger: triggerPeer, host: "g-c",
			k: fakeCluster{open: []string{"g-b-0"}}, died: []int{0}},

		// The bound is 2 s; g-c-0 began 10 s before the newest open
		// transaction at the same coordinator.
		{name: "stuck: open past the bound on the coordinator's clock", trigger: triggerStuck,
			k: fakeCluster{open: []string{"g-b-0", "g-c-0", "g-me-0"},
				starts: map[string]int64{"g-b-0": 10_000, "g-c-0": 0, "g-me-0": 10_000}},
			fenced: []string{"g-c-0"}, stuck: 1},
		{name: "stuck: never this instance's own", trigger: triggerStuck,
			k: fakeCluster{open: []string{"g-b-0", "g-me-0"},
				starts: map[string]int64{"g-b-0": 10_000, "g-me-0": 0}}},
		{name: "stuck: a fencing that fails is not told", trigger: triggerStuck,
			k: fakeCluster{open: []string{"g-b-0", "g-c-0", "g-d-0"}, refuse: "g-c-0",
				starts: map[string]int64{"g-b-0": 10_000, "g-c-0": 0, "g-d-0": 0}},
			fenced: []string{"g-d-0"}, stuck: 1},
		{name: "stuck: nothing listed, nothing fenced", trigger: triggerStuck,
			k: fakeCluster{listErr: lost}},
		{name: "stuck: with a broker silent, what the others listed", trigger: triggerStuck,
			k: fakeCluster{open: []string{"g-b-0", "g-c-0"}, partial: lost,
				starts: map[string]int64{"g-b-0": 10_000, "g-c-0": 0}},
			fenced: []string{"g-c-0"}, stuck: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &abortHooks{}
			k := &tt.k // each case's own
			a := k.aborter(hookList{h})
			log := slog.New(slog.DiscardHandler)
			switch tt.trigger {
			case triggerPlan:
				s := fencing(sarama.NewBalanceStrategyRange(), a, log)
				if _, err := s.Plan(map[string]sarama.ConsumerGroupMemberMetadata{}, nil); err != nil {
					t.Fatal(err)
				}
			case triggerPeer:
				newPeerWatch(a, log, "g-me", testSecret, "").dead(tt.host)
			case triggerStuck:
				w := newStuckWatch(a, log, "g-loop", 2*time.Second)
				_, err := w.look(fakeClient{}, fakeAdmin{k: k})
				if (err != nil) != (k.listErr != nil) {
					t.Fatalf("look: %v", err)
				}
			}
			slices.Sort(k.fenced)
			if !slices.Equal(k.fenced, tt.fenced) {
				t.Errorf("fenced %v, want %v", k.fenced, tt.fenced)
			}
			if h.dead != tt.dead || h.stuck != tt.stuck || !slices.Equal(h.instanceDied, tt.died) {
				t.Errorf("told %d dead, %d stuck, instance died %v; want %d, %d, %v",
					h.dead, h.stuck, h.instanceDied, tt.dead, tt.stuck, tt.died)
			}
		})
	}
}

// The stuck watch describes the open transactions only when one of them is
// another instance's: its own alone tell it nothing to fence.
func TestStuckLookDescribesOnlyWhenWatched(t *testing.T) {
	k := &fakeCluster{open: []string{"g-me-0", "g-me-1"}}
	w := newStuckWatch(k.aborter(nil), slog.New(slog.DiscardHandler), "g-loop", 2*time.Second)
	if _, err := w.look(fakeClient{}, fakeAdmin{k: k}); err != nil || k.describe != 0 {
		t.Errorf("look = %v after %d descriptions, want none", err, k.describe)
	}
}

// The one listing of the group's open transactions asks every broker and
// keeps the group's members' IDs, each once; a silent broker leaves the
// others' answer and a partial error, and brokers that all predate
// ListTransactions fail it with ErrUnsupportedVersion (the callers' fallback).
func TestListOpen(t *testing.T) {
	withList := append(slices.Clone(apiKeys), sarama.ApiVersionsResponseKey{ApiKey: 66, MinVersion: 0, MaxVersion: 1})
	tests := []struct {
		name    string
		keys    []sarama.ApiVersionsResponseKey
		down    bool // broker 2 refuses connections
		want    []string
		partial bool
		err     error
	}{
		{name: "every broker answers", keys: withList, want: []string{"g-b-0", "g-c-0", "g-c-1"}},
		{name: "a broker down", keys: withList, down: true, want: []string{"g-b-0", "g-c-0"}, partial: true},
		{name: "brokers before Kafka 3.0", keys: apiKeys, err: sarama.ErrUnsupportedVersion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b1, b2 := sarama.NewMockBroker(t, 1), sarama.NewMockBroker(t, 2)
			defer b1.Close()
			meta := sarama.NewMockMetadataResponse(t).SetBroker(b1.Addr(), 1).SetBroker(b2.Addr(), 2).SetController(1)
			serve := func(b *sarama.MockBroker, open ...string) {
				list := sarama.NewMockListTransactionsResponse(t)
				for _, id := range open {
					list.AddTransaction(id, 1, sarama.TransactionStateOngoing)
				}
				b.SetHandlerByMap(map[string]sarama.MockResponse{
					"ApiVersionsRequest":      sarama.NewMockApiVersionsResponse(t).SetApiKeys(tt.keys),
					"MetadataRequest":         meta,
					"ListTransactionsRequest": list,
				})
			}
			serve(b1, "g-c-0", "h-b-0", "g-b-0", "g-redrive")
			if tt.down {
				b2.Close() // its port refuses, as a killed broker's does
			} else {
				defer b2.Close()
				serve(b2, "g-b-0", "g-c-1")
			}
			a := newAborter("g", "g-me", &Config{Brokers: []string{b1.Addr()}}, nil)
			client, err := a.dial()
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			ids, partial, err := a.listOpen(client)
			if !slices.Equal(ids, tt.want) || (partial != nil) != tt.partial || !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
				t.Errorf("listOpen = %v, partial %v, err %v; want %v, partial %v, err %v", ids, partial, err, tt.want, tt.partial, tt.err)
			}
		})
	}
}
