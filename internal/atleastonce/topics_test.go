package atleastonce

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"

	"github.com/dedupkit/dedup/internal/kafkautil"
)

// lateTopics is a goka.TopicManager whose metadata shows a topic only from
// the visibleAt-th look on, like a broker that learns of a topic just
// created a moment later.
type lateTopics struct {
	goka.TopicManager // nil: only Partitions is called
	visibleAt, looks  int
	partitions        []int32
	failWith          error
}

// GetOffset fails with failWith until the visibleAt-th call.
func (l *lateTopics) GetOffset(string, int32, int64) (int64, error) {
	if l.looks++; l.visibleAt == 0 || l.looks < l.visibleAt {
		return -1, l.failWith
	}
	return 42, nil
}

func (l *lateTopics) Partitions(string) ([]int32, error) {
	if l.looks++; l.visibleAt == 0 || l.looks < l.visibleAt {
		return nil, errors.New("topic not found")
	}
	return l.partitions, nil
}

func TestOwnedTopicsWaitForMetadataInsteadOfCreating(t *testing.T) {
	for _, tc := range []struct {
		name      string
		visibleAt int // 0: never
		parts     int
		wantErr   string
	}{
		{"visible at once", 1, 6, ""},
		{"visible on the fourth look", 4, 6, ""},
		{"partition count differs", 1, 3, "has 3 partitions, want 6"},
		{"never visible", 0, 6, "not in the cluster's metadata"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			late := &lateTopics{visibleAt: tc.visibleAt, partitions: make([]int32, tc.parts)}
			tm := ownedTopics{TopicManager: late, timeout: 300 * time.Millisecond}
			for _, ensure := range []func() error{
				func() error { return tm.EnsureTableExists("g-table", 6) },
				func() error { return tm.EnsureStreamExists("g-loop", 6) },
				func() error { return tm.EnsureTopicExists("out", 6, 1, nil) },
			} {
				late.looks = 0
				err := ensure()
				if tc.wantErr == "" && err != nil {
					t.Fatalf("err %v, want nil", err)
				}
				if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				if tc.visibleAt > 1 && late.looks != tc.visibleAt {
					t.Fatalf("looked %d times, want %d", late.looks, tc.visibleAt)
				}
			}
		})
	}
}

// goka's partition setup reads the table's oldest offset; while a killed
// broker's partitions wait for a new leader, that read fails for seconds.
func TestOwnedTopicsGetOffsetRetriesTransientErrors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failWith  error
		visibleAt int // the call that succeeds; 0: none
		wantErr   error
		wantCalls int
	}{
		{"leader moving", sarama.ErrNotLeaderForPartition, 3, nil, 3},
		{"leader moving longer than the timeout", sarama.ErrNotLeaderForPartition, 0, sarama.ErrNotLeaderForPartition, -1},
		{"not transient", sarama.ErrTopicAuthorizationFailed, 3, sarama.ErrTopicAuthorizationFailed, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			late := &lateTopics{visibleAt: tc.visibleAt, failWith: tc.failWith}
			tm := ownedTopics{TopicManager: late, offsetTimeout: time.Second, log: slog.New(slog.DiscardHandler)}
			off, err := tm.GetOffset("g-table", 0, sarama.OffsetOldest)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if err == nil && off != 42 {
				t.Fatalf("offset %d, want 42", off)
			}
			if tc.wantCalls > 0 && late.looks != tc.wantCalls {
				t.Fatalf("%d calls, want %d", late.looks, tc.wantCalls)
			}
		})
	}
}

// goka's topic manager checks client.Brokers()[0], which is any broker of the
// metadata (sarama lists them from a map), so the wait before building it must
// see a dead broker wherever it is in that list, every time.
func TestBrokersReachableChecksEveryBrokerOfTheMetadata(t *testing.T) {
	live := sarama.NewMockBroker(t, 1)
	defer live.Close()
	other := sarama.NewMockBroker(t, 2)
	defer other.Close()
	dead := sarama.NewMockBroker(t, 3)
	deadAddr := dead.Addr()
	dead.Close() // its address now refuses connections

	cases := []struct {
		name     string
		listed   map[string]int32
		wantDead bool
	}{
		{"all up", map[string]int32{live.Addr(): 1, other.Addr(): 2}, false},
		{"one of three down", map[string]int32{live.Addr(): 1, other.Addr(): 2, deadAddr: 3}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			md := sarama.NewMockMetadataResponse(t).SetController(1)
			for addr, id := range tc.listed {
				md.SetBroker(addr, id)
			}
			versions := sarama.NewMockApiVersionsResponse(t).SetApiKeys([]sarama.ApiVersionsResponseKey{
				{ApiKey: 3, MinVersion: 0, MaxVersion: 12}, // Metadata
				{ApiKey: 18, MinVersion: 0, MaxVersion: 3}, // ApiVersions
			})
			live.SetHandlerByMap(map[string]sarama.MockResponse{"ApiVersionsRequest": versions, "MetadataRequest": md})
			other.SetHandlerByMap(map[string]sarama.MockResponse{"ApiVersionsRequest": versions})
			sc := sarama.NewConfig()
			sc.Net.DialTimeout = time.Second
			sc.Metadata.Retry.Max = 0
			for i := 0; i < 20; i++ {
				err := brokersReachable([]string{live.Addr()}, sc)
				if !tc.wantDead {
					if err != nil {
						t.Fatalf("attempt %d: %v", i, err)
					}
					continue
				}
				if err == nil {
					t.Fatalf("attempt %d: no error while %s is down", i, deadAddr)
				}
				if !strings.Contains(err.Error(), deadAddr) || !kafkautil.Transient(err) {
					t.Fatalf("attempt %d: %v: want a transient error naming %s", i, err, deadAddr)
				}
			}
		})
	}
}
