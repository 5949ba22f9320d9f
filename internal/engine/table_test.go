package engine

import (
	"errors"
	"testing"
	"time"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/codecs"
	"github.com/dedupkit/dedup/internal/wire"
)

func TestTableKey(t *testing.T) {
	tests := []struct {
		name    string
		kt      dedup.KeyType
		ev      wire.Event
		want    string
		wantErr error
	}{
		{"event id", dedup.KeyEventID, wire.Event{EventID: "e1", AggregateID: "a1"}, "e1", nil},
		{"cloudevents source and id", dedup.KeyEventID, wire.Event{EventID: "1", Source: "/a"}, "/a\x001", nil},
		{"aggregate id", dedup.KeyAggregateID, wire.Event{EventID: "e1", AggregateID: "a1"}, "a1", nil},
		{"aggregate id missing", dedup.KeyAggregateID, wire.Event{EventID: "e1"}, "", dedup.ErrNoAggregateID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DedupKey(tt.kt, &tt.ev)
			if !errors.Is(err, tt.wantErr) || got != tt.want {
				t.Fatalf("Key = %q, %v; want %q, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
	// Source/ID pairs that concatenate to the same string must not collide.
	tb := &dedup.Topology{KeyType: dedup.KeyEventID, Retention: time.Hour}
	k1, _ := DedupKey(tb.KeyType, &wire.Event{Source: "a/b", EventID: "c"})
	k2, _ := DedupKey(tb.KeyType, &wire.Event{Source: "a", EventID: "b/c"})
	if k1 == k2 {
		t.Fatalf("keys collide: %q", k1)
	}
}

func TestTableJudge(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	tb := &dedup.Topology{KeyType: dedup.KeyEventID, Retention: 24 * time.Hour}
	live := &codecs.SeenRecord{ExpiresAt: now.Add(time.Hour)}
	dead := &codecs.SeenRecord{ExpiresAt: now.Add(-time.Hour)}
	tests := []struct {
		name     string
		existing *codecs.SeenRecord
		evTime   time.Time
		want     verdict
	}{
		{"unseen recent", nil, now.Add(-time.Minute), first},
		{"unseen no time", nil, time.Time{}, first},
		{"unseen at retention edge", nil, now.Add(-24 * time.Hour), first},
		{"unseen older than retention", nil, now.Add(-25 * time.Hour), tooOld},
		{"seen", live, now, duplicate},
		{"seen old event still duplicate", live, now.Add(-100 * time.Hour), duplicate},
		{"seen but expired", dead, now, expired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := verdictOf(tb, tt.existing, tt.evTime, now); got != tt.want {
				t.Fatalf("Judge = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestTableRecord(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	tb := &dedup.Topology{KeyType: dedup.KeyEventID, Retention: time.Hour}
	ts := now.Add(-time.Second)
	r := seenRecord(tb, &wire.Event{EventID: "e", AggregateID: "a"}, dedup.Position{Topic: "in", Partition: 2, Offset: 7, Timestamp: ts}, now)
	if !r.FirstProcessed.Equal(now) || !r.ExpiresAt.Equal(now.Add(time.Hour)) || !r.EventTime.Equal(ts) ||
		r.AggregateID != "a" || r.Topic != "in" || r.Partition != 2 || r.Offset != 7 {
		t.Fatalf("unexpected record %+v", r)
	}
	if verdictOf(tb, r, ts, now.Add(59*time.Minute)) != duplicate || verdictOf(tb, r, ts, now.Add(time.Hour)) != expired {
		t.Fatal("record does not expire after the retention")
	}
}
