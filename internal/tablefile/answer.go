package tablefile

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/dedupkit/dedup/codecs"
)

// RecordJSON is a seen record as the inspection API and CLI show it.
type RecordJSON struct {
	FirstProcessed time.Time  `json:"firstProcessed"`
	EventTime      *time.Time `json:"eventTime,omitempty"`
	AggregateID    string     `json:"aggregateId,omitempty"`
	SourceTopic    string     `json:"sourceTopic"`
	SourcePart     int32      `json:"sourcePartition"`
	SourceOffset   int64      `json:"sourceOffset"`
	ExpiresAt      time.Time  `json:"expiresAt"`
	Expired        bool       `json:"expired"`
}

// ToJSON is r as the inspection API shows it.
func ToJSON(r *codecs.SeenRecord) *RecordJSON {
	out := &RecordJSON{FirstProcessed: r.FirstProcessed, AggregateID: r.AggregateID, SourceTopic: r.Topic,
		SourcePart: r.Partition, SourceOffset: r.Offset, ExpiresAt: r.ExpiresAt, Expired: r.Expired(time.Now())}
	if !r.EventTime.IsZero() {
		out.EventTime = &r.EventTime
	}
	return out
}

// Answer is the body of GET /v1/seen/{id}.
type Answer struct {
	ID              string      `json:"id"`
	Found           bool        `json:"found"`
	Partition       *int32      `json:"partition,omitempty"`
	Record          *RecordJSON `json:"record,omitempty"`
	OwnedPartitions []int32     `json:"ownedPartitions,omitempty"`
	Note            string      `json:"note,omitempty"`
}

// Key is the dedup key of id: CloudEvents IDs are unique only with
// their source, joined as the engine joins them.
func Key(r *http.Request) string {
	if src := r.URL.Query().Get("source"); src != "" {
		return src + "\x00" + r.PathValue("id")
	}
	return r.PathValue("id")
}

// Write writes ans as JSON, 404 when the key was not found.
func Write(w http.ResponseWriter, ans Answer, err error) {
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if !ans.Found {
		w.WriteHeader(http.StatusNotFound)
	}
	json.NewEncoder(w).Encode(ans)
}

// Found is the Answer of a lookup that found its key.
func Found(l Lookup) (Answer, error) {
	var rec codecs.SeenRecord
	if err := rec.UnmarshalBinary(l.Value); err != nil {
		return Answer{}, fmt.Errorf("partition %d: %w", l.Partition, err)
	}
	return Answer{ID: l.Key, Found: true, Partition: &l.Partition, Record: ToJSON(&rec)}, nil
}
