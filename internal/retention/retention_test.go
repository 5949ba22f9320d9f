package retention

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/processor"
)

// warnings is a slog.Handler that counts Warn records and signals the first.
type warnings struct {
	mu    sync.Mutex
	msgs  []string
	first chan struct{}
}

func newWarnings() *warnings { return &warnings{first: make(chan struct{})} }

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.msgs) == 0 {
		close(w.first)
	}
	w.msgs = append(w.msgs, r.Message)
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }
func (w *warnings) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs...)
}

// serveMetadata makes live answer Metadata naming broker id at addr as the
// only broker and the controller, and DescribeConfigs with sarama's mock
// (retention.ms 5000 for any topic).
func serveMetadata(t *testing.T, live *sarama.MockBroker, addr string, id int32) {
	live.SetHandlerByMap(map[string]sarama.MockResponse{
		"ApiVersionsRequest": sarama.NewMockApiVersionsResponse(t).SetApiKeys([]sarama.ApiVersionsResponseKey{
			{ApiKey: 3, MinVersion: 0, MaxVersion: 12}, // Metadata
			{ApiKey: 18, MinVersion: 0, MaxVersion: 3}, // ApiVersions
			{ApiKey: 32, MinVersion: 0, MaxVersion: 4}, // DescribeConfigs
		}),
		"MetadataRequest":        sarama.NewMockMetadataResponse(t).SetBroker(addr, id).SetController(id).SetLeader("orders", 0, id),
		"DescribeConfigsRequest": sarama.NewMockDescribeConfigsResponse(t),
	})
}

// DescribeConfigs goes to any broker of the metadata; right after a SIGKILL
// that can be the dead one. The check must retry, not exit.
func TestRetentionCheckWaitsOutADeadBroker(t *testing.T) {
	dead := sarama.NewMockBroker(t, 2)
	dead.Close() // its port refuses connections now
	live := sarama.NewMockBroker(t, 1)
	defer live.Close()
	serveMetadata(t, live, dead.Addr(), 2)
	warn := newWarnings()
	brokers, log := []string{live.Addr()}, slog.New(warn)
	topo := &dedup.Topology{Inputs: []string{"orders"}, Retention: time.Hour}

	done := make(chan error, 1)
	go func() { done <- Check(context.Background(), brokers, processor.Security{}, log, nil, topo, false) }()
	select {
	case <-warn.first: // the first attempt hit the dead broker
	case err := <-done:
		t.Fatalf("Check returned before any retry: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no retry logged within 30s")
	}
	serveMetadata(t, live, live.Addr(), 1) // the dead broker was fenced
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Check: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Check still running 30s after the dead broker left the metadata")
	}
	if got := warn.list(); !strings.Contains(got[0], "retrying") {
		t.Errorf("first warning %q, want a retry", got[0])
	}
}

// A retention shorter than the topic's under --strict-retention is a
// configuration error: refused at once, nothing retried.
func TestRetentionCheckStrictRefusesAtOnce(t *testing.T) {
	live := sarama.NewMockBroker(t, 1)
	defer live.Close()
	serveMetadata(t, live, live.Addr(), 1)
	warn := newWarnings()
	brokers, log := []string{live.Addr()}, slog.New(warn)
	topo := &dedup.Topology{Inputs: []string{"orders", "orders-retry"}, Retention: time.Second}

	err := Check(context.Background(), brokers, processor.Security{}, log, nil, topo, true)
	want := `--retention 1s is shorter than retention.ms of input topics "orders" (5s), "orders-retry" (5s)`
	if err == nil || !strings.Contains(err.Error(), "refused by --strict-retention") || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want a refusal saying %q", err, want)
	}
	if got := warn.list(); len(got) != 0 {
		t.Errorf("warnings %q, want none", got)
	}
}

// Every input must fit the retention: the message names each that keeps
// its records longer, with its retention.ms, and no other.
func TestKeptLonger(t *testing.T) {
	day := 24 * time.Hour
	for _, tc := range []struct {
		name   string
		topics []topicRetention
		want   []string
	}{
		{"all shorter or equal", []topicRetention{{"a", time.Hour, false}, {"b", day, false}}, nil},
		{"one longer", []topicRetention{{"a", time.Hour, false}, {"b", 7 * day, false}}, []string{`"b" (168h0m0s)`}},
		{"infinite", []topicRetention{{"a", 0, true}, {"b", time.Hour, false}}, []string{`"a" (infinite (-1))`}},
		{"both", []topicRetention{{"a", 0, true}, {"b", 2 * day, false}}, []string{`"a" (infinite (-1))`, `"b" (48h0m0s)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := keptLonger(day, tc.topics); !slices.Equal(got, tc.want) {
				t.Fatalf("keptLonger = %q, want %q", got, tc.want)
			}
		})
	}
}
