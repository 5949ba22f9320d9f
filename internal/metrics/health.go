package metrics

import (
	"encoding/json"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
)

// Health is a worker's answer to /readyz and /healthz, and the body of both
// (JSON), so a probe's log or an operator's curl says why.
type Health struct {
	Ready bool `json:"ready"`
	Live  bool `json:"live"`
	// Reasons say why the worker is not ready or not live.
	Reasons []string `json:"reasons,omitempty"`
	// ConsecutiveAborts is the most transactions a member aborted in a row
	// since it last committed (exactly-once).
	ConsecutiveAborts int `json:"consecutiveAborts"`
	// UncommittedSeconds is how long the oldest consumed record that is not
	// committed has waited; 0 when none is (exactly-once).
	UncommittedSeconds float64 `json:"uncommittedSeconds"`
	// SinceCommitSeconds is the time since the last commit; absent before
	// the first one, and for the at-least-once runtime.
	SinceCommitSeconds *float64 `json:"sinceCommitSeconds,omitempty"`
	// CommitChecks is false for a runtime that does not watch its commits
	// (goka's at-least-once runtime): only the table restore is judged.
	CommitChecks bool `json:"commitChecks"`
}

// serveHealth answers 200 when ok(h), else 503, with h as JSON.
func serveHealth(w http.ResponseWriter, h Health, ok bool) {
	w.Header().Set("Content-Type", "application/json")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	json.NewEncoder(w).Encode(h)
}

// RegisterHealth exports the commit-health numbers of health on reg:
// dedup_consecutive_aborts and dedup_uncommitted_seconds, read at each
// scrape.
func RegisterHealth(reg prometheus.Registerer, group string, health func() Health) {
	labels := prometheus.Labels{"group": group}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "dedup", Name: "consecutive_aborts", ConstLabels: labels,
			Help: "Transactions aborted in a row since the last commit (the most of any member); /readyz is 503 from --ready-abort-limit."},
			func() float64 { return float64(health().ConsecutiveAborts) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "dedup", Name: "uncommitted_seconds", ConstLabels: labels,
			Help: "How long the oldest consumed record that is not committed has waited; /readyz is 503 from --ready-stall-after, /healthz from --live-stall-after."},
			func() float64 { return health().UncommittedSeconds }),
	)
}
