package processor

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/kafkautil"
)

// retryLog is a slog.Handler that signals each Warn record on a channel.
type retryLog struct {
	once    sync.Once
	retried chan struct{} // closed at the first retry
	mu      sync.Mutex
	n       int
}

func newRetryLog() *retryLog { return &retryLog{retried: make(chan struct{})} }

func (l *retryLog) Enabled(_ context.Context, lvl slog.Level) bool { return lvl >= slog.LevelWarn }
func (l *retryLog) Handle(context.Context, slog.Record) error {
	l.mu.Lock()
	l.n++
	l.mu.Unlock()
	l.once.Do(func() { close(l.retried) })
	return nil
}
func (l *retryLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *retryLog) WithGroup(string) slog.Handler      { return l }
func (l *retryLog) count() int                         { l.mu.Lock(); defer l.mu.Unlock(); return l.n }

// cluster serves metadata from live (broker 1) that, like a Kafka cluster
// right after a broker was SIGKILLed, still lists the dead broker 2 and
// names it the controller; fence switches to the metadata the controller
// publishes once it has fenced broker 2.
type cluster struct {
	t    *testing.T
	live *sarama.MockBroker
	dead string // address of broker 2: nothing listens there
}

func newCluster(t *testing.T, withInput bool) *cluster {
	dead := sarama.NewMockBroker(t, 2)
	dead.Close() // its port now refuses connections, as a killed broker's does
	c := &cluster{t: t, live: sarama.NewMockBroker(t, 1), dead: dead.Addr()}
	t.Cleanup(c.live.Close)
	c.serve(withInput, false)
	return c
}

func (c *cluster) serve(withInput, fenced bool) {
	meta := sarama.NewMockMetadataResponse(c.t).SetBroker(c.live.Addr(), 1)
	if fenced {
		meta.SetController(1)
	} else {
		meta.SetBroker(c.dead, 2).SetController(2)
	}
	if withInput {
		for p := int32(0); p < 3; p++ {
			meta.SetLeader("orders", p, 1)
		}
	}
	c.live.SetHandlerByMap(map[string]sarama.MockResponse{
		"ApiVersionsRequest":  sarama.NewMockApiVersionsResponse(c.t).SetApiKeys(apiKeys),
		"MetadataRequest":     meta,
		"CreateTopicsRequest": sarama.NewMockCreateTopicsResponse(c.t),
		// kafkautil.CheckGroup: the group may be read.
		"FindCoordinatorRequest": sarama.NewMockFindCoordinatorResponse(c.t).SetCoordinator(sarama.CoordinatorGroup, "g", c.live),
		"DescribeGroupsRequest":  sarama.NewMockDescribeGroupsResponse(c.t).AddGroupDescription("g", &sarama.GroupDescription{GroupId: "g", State: "Dead"}),
		// recordLimit: max.message.bytes of the topics written.
		"DescribeConfigsRequest": sarama.NewMockDescribeConfigsResponse(c.t),
	})
}

// apiKeys are the requests prepareTopics sends, up to versions sarama speaks.
var apiKeys = []sarama.ApiVersionsResponseKey{
	{ApiKey: 3, MinVersion: 0, MaxVersion: 12}, // Metadata
	{ApiKey: 10, MinVersion: 0, MaxVersion: 2}, // FindCoordinator
	{ApiKey: 15, MinVersion: 0, MaxVersion: 4}, // DescribeGroups
	{ApiKey: 18, MinVersion: 0, MaxVersion: 3}, // ApiVersions
	{ApiKey: 19, MinVersion: 0, MaxVersion: 4}, // CreateTopics (the mock answers up to v4)
	{ApiKey: 32, MinVersion: 0, MaxVersion: 4}, // DescribeConfigs
}

// created lists the topics the live broker was asked to create.
func (c *cluster) created() []string {
	var topics []string
	for _, rr := range c.live.History() {
		if req, ok := rr.Request.(*sarama.CreateTopicsRequest); ok {
			for name := range req.TopicDetails {
				topics = append(topics, name)
			}
		}
	}
	slices.Sort(topics)
	return topics
}

func testTopology() *dedup.Topology {
	return &dedup.Topology{Group: "g", Inputs: []string{"orders"}, Outputs: []string{"out"}, DLQ: "g-dlq"}
}

// A broker killed moments before the worker starts is still in the metadata
// and may be named the controller: the first attempt fails with "connection
// refused". Startup must wait until the cluster has fenced it, not exit.
func TestPrepareTopicsWaitsOutADeadBroker(t *testing.T) {
	c := newCluster(t, true)
	log := newRetryLog()
	cfg := &Config{Brokers: []string{c.live.Addr()}, Replication: -1, Logger: slog.New(log)}

	type result struct {
		parts, limit int
		err          error
	}
	done := make(chan result, 1)
	go func() {
		parts, limit, _, err := prepareTopics(context.Background(), cfg, testTopology())
		done <- result{int(parts), limit, err}
	}()

	select {
	case <-log.retried: // the dead controller failed the first attempt
	case r := <-done:
		t.Fatalf("prepareTopics returned before any retry: partitions %d, err %v", r.parts, r.err)
	case <-time.After(30 * time.Second):
		t.Fatal("no retry logged within 30s")
	}
	c.serve(true, true) // the controller fenced broker 2
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("prepareTopics still running 30s after the dead broker was fenced")
	}
	if r.err != nil {
		t.Fatalf("prepareTopics: %v", r.err)
	}
	if r.parts != 3 {
		t.Errorf("partitions = %d, want 3 (the input's)", r.parts)
	}
	if want := 1_000_000 - kafkautil.BatchOverhead; r.limit != want { // the mock's max.message.bytes
		t.Errorf("record limit = %d, want %d", r.limit, want)
	}
	if want := []string{"g-dlq", "g-loop", "g-table", "out"}; !slices.Equal(c.created(), want) {
		t.Errorf("created %v, want %v", c.created(), want)
	}
}

// SIGTERM while startup waits for a dead broker: New's context ends the wait
// at once instead of after kafkautil.StartupTimeout (2 min).
func TestPrepareTopicsStopsWaitingWhenCancelled(t *testing.T) {
	c := newCluster(t, true) // the controller stays dead
	log := newRetryLog()
	cfg := &Config{Brokers: []string{c.live.Addr()}, Replication: -1, Logger: slog.New(log)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, _, err := prepareTopics(ctx, cfg, testTopology())
		done <- err
	}()
	select {
	case <-log.retried:
	case err := <-done:
		t.Fatalf("prepareTopics returned before any retry: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no retry logged within 30s")
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("prepareTopics still waiting 10s after its context was cancelled")
	}
}

// A missing input topic is a configuration error: no retries, and no wait
// beyond the few seconds a new topic's metadata takes to reach every broker
// (kafkautil.InputTopicGrace).
func TestPrepareTopicsFailsAtOnceWithoutInput(t *testing.T) {
	c := newCluster(t, false)
	c.serve(false, true) // a healthy cluster that has no topic "orders"
	log := newRetryLog()
	cfg := &Config{Brokers: []string{c.live.Addr()}, Replication: -1, Logger: slog.New(log)}

	start := time.Now()
	_, _, _, err := prepareTopics(context.Background(), cfg, testTopology())
	if !errors.Is(err, kafkautil.ErrNoInputTopic) {
		t.Fatalf("err = %v, want ErrNoInputTopic", err)
	}
	if log.count() != 0 {
		t.Errorf("%d retries logged for a configuration error, want 0", log.count())
	}
	if took := time.Since(start); took > kafkautil.InputTopicGrace+3*time.Second {
		t.Errorf("took %v to report a missing input topic", took)
	}
	if got := c.created(); len(got) != 0 {
		t.Errorf("created %v without an input topic", got)
	}
}
