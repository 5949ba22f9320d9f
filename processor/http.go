package processor

import (
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupkit/dedup/internal/metrics"
	"github.com/dedupkit/dedup/internal/tablefile"
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

func (p *Processor) serveSeen(w http.ResponseWriter, r *http.Request) {
	ans, err := p.seen(tablefile.Key(r))
	ans.ID = r.PathValue("id")
	tablefile.Write(w, ans, err)
}

// seen answers whether this process's tables hold key.
func (p *Processor) seen(key string) (tablefile.Answer, error) {
	var ans tablefile.Answer
	l, err := p.lookup(key)
	if err != nil {
		return ans, err
	}
	if !l.Found {
		part := hashPartition(key, p.partitions)
		ans.OwnedPartitions = l.Owned
		held := "another instance holds"
		if slices.Contains(l.Owned, part) {
			held = "this instance holds: never processed, or expired and swept"
		}
		ans.Note = fmt.Sprintf("not in the partitions this instance holds; if it was re-keyed by the worker (or produced with an FNV-1a partitioner) it belongs to partition %d, which %s", part, held)
		return ans, nil
	}
	return tablefile.Found(l)
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
