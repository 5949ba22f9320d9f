package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/dedupkit/dedup/atleastonce"
	"github.com/dedupkit/dedup/codecs"
	"github.com/dedupkit/dedup/processor"
)

// seenRecordJSON is a seen record as the inspection API and CLI show it.
type seenRecordJSON struct {
	FirstProcessed time.Time  `json:"firstProcessed"`
	EventTime      *time.Time `json:"eventTime,omitempty"`
	AggregateID    string     `json:"aggregateId,omitempty"`
	SourceTopic    string     `json:"sourceTopic"`
	SourcePart     int32      `json:"sourcePartition"`
	SourceOffset   int64      `json:"sourceOffset"`
	ExpiresAt      time.Time  `json:"expiresAt"`
	Expired        bool       `json:"expired"`
}

func recordJSON(r *codecs.SeenRecord) *seenRecordJSON {
	out := &seenRecordJSON{FirstProcessed: r.FirstProcessed, AggregateID: r.AggregateID, SourceTopic: r.Topic,
		SourcePart: r.Partition, SourceOffset: r.Offset, ExpiresAt: r.ExpiresAt, Expired: r.Expired(time.Now())}
	if !r.EventTime.IsZero() {
		out.EventTime = &r.EventTime
	}
	return out
}

// seenAnswer is the body of GET /v1/seen/{id}.
type seenAnswer struct {
	ID              string          `json:"id"`
	Found           bool            `json:"found"`
	Partition       *int32          `json:"partition,omitempty"`
	Record          *seenRecordJSON `json:"record,omitempty"`
	OwnedPartitions []int32         `json:"ownedPartitions,omitempty"`
	Note            string          `json:"note,omitempty"`
}

// seenHandler answers GET /v1/seen/{id}[?source=ce_source] from the local
// table of the running worker.
func seenHandler(cfg *Config, w worker) http.HandlerFunc {
	return func(rw http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		key := id
		if src := r.URL.Query().Get("source"); src != "" {
			key = src + "\x00" + id
		}
		ans, err := lookupSeen(w, key)
		ans.ID = id
		if err != nil {
			http.Error(rw, err.Error(), http.StatusInternalServerError)
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		if !ans.Found {
			rw.WriteHeader(http.StatusNotFound)
		}
		json.NewEncoder(rw).Encode(ans)
	}
}

func lookupSeen(w worker, key string) (seenAnswer, error) {
	var ans seenAnswer
	switch rt := w.(type) {
	case *processor.Processor:
		l, err := rt.Lookup(key)
		if err != nil {
			return ans, err
		}
		if !l.Found {
			p := rt.HashPartition(key)
			ans.OwnedPartitions = l.Owned
			ans.Note = fmt.Sprintf("not in the partitions this instance holds; if it was re-keyed by the worker (or produced with an FNV-1a partitioner) it belongs to partition %d, which %s",
				p, map[bool]string{true: "this instance holds: never processed, or expired and swept", false: "another instance holds"}[contains(l.Owned, p)])
			return ans, nil
		}
		return decodedAnswer(l.Partition, l.Value)
	case *atleastonce.Runner:
		v, err := rt.Get(key)
		if err != nil {
			ans.Note = "the key's partition is held by another instance: " + err.Error()
			return ans, nil
		}
		rec, ok := v.(*codecs.SeenRecord)
		if !ok || rec == nil {
			ans.Note = "not seen (or its partition is still recovering)"
			return ans, nil
		}
		return seenAnswer{Found: true, Record: recordJSON(rec)}, nil
	}
	return ans, fmt.Errorf("runtime %T has no table", w)
}

func decodedAnswer(partition int32, value []byte) (seenAnswer, error) {
	var rec codecs.SeenRecord
	if err := rec.UnmarshalBinary(value); err != nil {
		return seenAnswer{}, fmt.Errorf("partition %d: %w", partition, err)
	}
	return seenAnswer{Found: true, Partition: &partition, Record: recordJSON(&rec)}, nil
}

func contains(s []int32, v int32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
