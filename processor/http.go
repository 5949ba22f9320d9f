package processor

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupkit/dedup/codecs"
	"github.com/dedupkit/dedup/internal/metrics"
)

// HTTPHandler serves what an operator asks a worker: GET /healthz (the
// process is up), GET /readyz (every member has its partitions restored),
// GET /v1/seen/{id}[?source=<ce_source>] (the local table's record of a
// dedup key) and, when Config.Registerer is also a prometheus.Gatherer
// (a *prometheus.Registry is), GET /metrics. Mount it on any server.
func (p *Processor) HTTPHandler() http.Handler {
	g, _ := p.cfg.Registerer.(prometheus.Gatherer)
	if g == nil {
		g = prometheus.NewRegistry() // an empty /metrics
	}
	mux := metrics.Handler(g, p.httpHealth)
	mux.HandleFunc("GET /v1/seen/{id}", p.serveSeen)
	return mux
}

// SeenRecordJSON is a seen record as the inspection API and CLI show it.
type SeenRecordJSON struct {
	FirstProcessed time.Time  `json:"firstProcessed"`
	EventTime      *time.Time `json:"eventTime,omitempty"`
	AggregateID    string     `json:"aggregateId,omitempty"`
	SourceTopic    string     `json:"sourceTopic"`
	SourcePart     int32      `json:"sourcePartition"`
	SourceOffset   int64      `json:"sourceOffset"`
	ExpiresAt      time.Time  `json:"expiresAt"`
	Expired        bool       `json:"expired"`
}

// RecordJSON is r as the inspection API shows it.
func RecordJSON(r *codecs.SeenRecord) *SeenRecordJSON {
	out := &SeenRecordJSON{FirstProcessed: r.FirstProcessed, AggregateID: r.AggregateID, SourceTopic: r.Topic,
		SourcePart: r.Partition, SourceOffset: r.Offset, ExpiresAt: r.ExpiresAt, Expired: r.Expired(time.Now())}
	if !r.EventTime.IsZero() {
		out.EventTime = &r.EventTime
	}
	return out
}

// SeenAnswer is the body of GET /v1/seen/{id}.
type SeenAnswer struct {
	ID              string          `json:"id"`
	Found           bool            `json:"found"`
	Partition       *int32          `json:"partition,omitempty"`
	Record          *SeenRecordJSON `json:"record,omitempty"`
	OwnedPartitions []int32         `json:"ownedPartitions,omitempty"`
	Note            string          `json:"note,omitempty"`
}

// SeenKey is the dedup key of id: CloudEvents IDs are unique only with
// their source, joined as dedup.Table.Key joins them.
func SeenKey(r *http.Request) string {
	if src := r.URL.Query().Get("source"); src != "" {
		return src + "\x00" + r.PathValue("id")
	}
	return r.PathValue("id")
}

// WriteSeen writes ans as JSON, 404 when the key was not found.
func WriteSeen(w http.ResponseWriter, ans SeenAnswer, err error) {
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

func (p *Processor) serveSeen(w http.ResponseWriter, r *http.Request) {
	ans, err := p.seen(SeenKey(r))
	ans.ID = r.PathValue("id")
	WriteSeen(w, ans, err)
}

// seen answers whether this process's tables hold key.
func (p *Processor) seen(key string) (SeenAnswer, error) {
	var ans SeenAnswer
	l, err := p.Lookup(key)
	if err != nil {
		return ans, err
	}
	if !l.Found {
		part := p.HashPartition(key)
		ans.OwnedPartitions = l.Owned
		held := "another instance holds"
		if slices.Contains(l.Owned, part) {
			held = "this instance holds: never processed, or expired and swept"
		}
		ans.Note = fmt.Sprintf("not in the partitions this instance holds; if it was re-keyed by the worker (or produced with an FNV-1a partitioner) it belongs to partition %d, which %s", part, held)
		return ans, nil
	}
	return Answer(l)
}

// Answer is the SeenAnswer of a lookup that found its key.
func Answer(l Lookup) (SeenAnswer, error) {
	var rec codecs.SeenRecord
	if err := rec.UnmarshalBinary(l.Value); err != nil {
		return SeenAnswer{}, fmt.Errorf("partition %d: %w", l.Partition, err)
	}
	return SeenAnswer{ID: l.Key, Found: true, Partition: &l.Partition, Record: RecordJSON(&rec)}, nil
}

// httpHealth is Health as /readyz, /healthz and the health gauges show it.
func (p *Processor) httpHealth() metrics.Health {
	ph := p.Health()
	h := metrics.Health{Ready: ph.Ready, Live: ph.Live, Reasons: ph.Reasons, ConsecutiveAborts: ph.ConsecutiveAborts,
		UncommittedSeconds: ph.Uncommitted.Seconds(), CommitChecks: true}
	if !ph.LastCommit.IsZero() {
		s := time.Since(ph.LastCommit).Seconds()
		h.SinceCommitSeconds = &s
	}
	return h
}
