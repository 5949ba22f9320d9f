package dedup

import (
	"errors"
	"testing"
	"time"

	"github.com/dedupkit/dedup/codecs"
	"github.com/dedupkit/dedup/internal/wire"
)

func TestTableKey(t *testing.T) {
	tests := []struct {
		name    string
		kt      KeyType
		ev      wire.Event
		want    string
		wantErr error
	}{
		{"event id", KeyEventID, wire.Event{EventID: "e1", AggregateID: "a1"}, "e1", nil},
		{"cloudevents source and id", KeyEventID, wire.Event{EventID: "1", Source: "/a"}, "/a\x001", nil},
		{"aggregate id", KeyAggregateID, wire.Event{EventID: "e1", AggregateID: "a1"}, "a1", nil},
		{"aggregate id missing", KeyAggregateID, wire.Event{EventID: "e1"}, "", ErrNoAggregateID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Table{KeyType: tt.kt, Retention: time.Hour}.Key(&tt.ev)
			if !errors.Is(err, tt.wantErr) || got != tt.want {
				t.Fatalf("Key = %q, %v; want %q, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
	// Source/ID pairs that concatenate to the same string must not collide.
	tb := Table{KeyType: KeyEventID, Retention: time.Hour}
	k1, _ := tb.Key(&wire.Event{Source: "a/b", EventID: "c"})
	k2, _ := tb.Key(&wire.Event{Source: "a", EventID: "b/c"})
	if k1 == k2 {
		t.Fatalf("keys collide: %q", k1)
	}
}

func TestTableJudge(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	tb := Table{KeyType: KeyEventID, Retention: 24 * time.Hour}
	live := &codecs.SeenRecord{ExpiresAt: now.Add(time.Hour)}
	dead := &codecs.SeenRecord{ExpiresAt: now.Add(-time.Hour)}
	tests := []struct {
		name     string
		existing *codecs.SeenRecord
		evTime   time.Time
		want     Verdict
	}{
		{"unseen recent", nil, now.Add(-time.Minute), First},
		{"unseen no time", nil, time.Time{}, First},
		{"unseen at retention edge", nil, now.Add(-24 * time.Hour), First},
		{"unseen older than retention", nil, now.Add(-25 * time.Hour), TooOld},
		{"seen", live, now, Duplicate},
		{"seen old event still duplicate", live, now.Add(-100 * time.Hour), Duplicate},
		{"seen but expired", dead, now, Expired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tb.Judge(tt.existing, tt.evTime, now); got != tt.want {
				t.Fatalf("Judge = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestTableRecord(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	tb := Table{KeyType: KeyEventID, Retention: time.Hour}
	ts := now.Add(-time.Second)
	r := tb.Record(&wire.Event{EventID: "e", AggregateID: "a"}, Position{Topic: "in", Partition: 2, Offset: 7, Timestamp: ts}, now)
	if !r.FirstProcessed.Equal(now) || !r.ExpiresAt.Equal(now.Add(time.Hour)) || !r.EventTime.Equal(ts) ||
		r.AggregateID != "a" || r.Topic != "in" || r.Partition != 2 || r.Offset != 7 {
		t.Fatalf("unexpected record %+v", r)
	}
	if tb.Judge(r, ts, now.Add(59*time.Minute)) != Duplicate || tb.Judge(r, ts, now.Add(time.Hour)) != Expired {
		t.Fatal("record does not expire after the retention")
	}
}

func TestTableValidate(t *testing.T) {
	tests := []struct {
		tb Table
		ok bool
	}{
		{Table{KeyType: KeyEventID, Retention: time.Hour}, true},
		{Table{KeyType: "offset", Retention: time.Hour}, false},
		{Table{KeyType: KeyAggregateID, Retention: 0}, false},
	}
	for _, tt := range tests {
		if err := tt.tb.Validate(); (err == nil) != tt.ok {
			t.Errorf("%+v: Validate = %v", tt.tb, err)
		}
	}
}
