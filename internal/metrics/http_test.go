package metrics

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestHandler(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, "g1")
	m.OnProcessed(0, 20*time.Millisecond)
	m.OnSkipped(0)
	m.OnSkipped(1)
	m.OnDeadLettered("not-json")
	m.OnTableSize(3, 42)
	var health atomic.Pointer[Health]
	health.Store(&Health{Live: true, Reasons: []string{"tables restored"}})
	srv := httptest.NewServer(Handler(reg, func() Health { return *health.Load() }))
	defer srv.Close()

	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	_, body := get("/metrics")
	for _, want := range []string{
		`dedup_events_processed_total{group="g1"} 1`,
		`dedup_duplicates_skipped_total{group="g1"} 2`,
		`dedup_dead_lettered_total{group="g1",reason="not-json"} 1`,
		`dedup_table_entries{group="g1",partition="3"} 42`,
		`dedup_event_age_seconds_count{group="g1"} 1`,
		`dedup_processing_latency_seconds_count{group="g1"} 1`,
		"# HELP dedup_processing_latency_seconds Deprecated: use dedup_event_age_seconds",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz = %d", code)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, `"reasons":["tables restored"]`) {
		t.Errorf("/readyz while recovering = %d %s, want 503 with the reason", code, body)
	}
	health.Store(&Health{Ready: true, Live: true})
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("/readyz when ready = %d", code)
	}
}

// Each endpoint answers its own question, with the whole report as the body.
func TestHealthEndpoints(t *testing.T) {
	since := 42.5
	tests := []struct {
		name            string
		health          Health
		readyz, healthz int
		body            string
	}{
		{"ready and live", Health{Ready: true, Live: true, CommitChecks: true, SinceCommitSeconds: &since}, 200, 200,
			`{"ready":true,"live":true,"consecutiveAborts":0,"uncommittedSeconds":0,"sinceCommitSeconds":42.5,"commitChecks":true}`},
		{"aborting", Health{Live: true, Reasons: []string{"7 transactions aborted in a row"}, ConsecutiveAborts: 7, CommitChecks: true}, 503, 200,
			`{"ready":false,"live":true,"reasons":["7 transactions aborted in a row"],"consecutiveAborts":7,"uncommittedSeconds":0,"commitChecks":true}`},
		{"stalled", Health{Reasons: []string{"not live"}, UncommittedSeconds: 301, CommitChecks: true}, 503, 503,
			`{"ready":false,"live":false,"reasons":["not live"],"consecutiveAborts":0,"uncommittedSeconds":301,"commitChecks":true}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			RegisterHealth(reg, "g1", func() Health { return tt.health })
			srv := httptest.NewServer(Handler(reg, func() Health { return tt.health }))
			defer srv.Close()
			for path, want := range map[string]int{"/readyz": tt.readyz, "/healthz": tt.healthz} {
				resp, err := http.Get(srv.URL + path)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != want || strings.TrimSpace(string(b)) != tt.body || resp.Header.Get("Content-Type") != "application/json" {
					t.Errorf("%s = %d %s %s, want %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), b, want, tt.body)
				}
			}
			body := scrape(t, reg)
			for _, want := range []string{
				fmt.Sprintf(`dedup_consecutive_aborts{group="g1"} %d`, tt.health.ConsecutiveAborts),
				fmt.Sprintf(`dedup_uncommitted_seconds{group="g1"} %v`, tt.health.UncommittedSeconds),
			} {
				if !strings.Contains(body, want) {
					t.Errorf("/metrics lacks %q", want)
				}
			}
		})
	}
}

// The runtime's hooks land in the exposition under their documented names.
func TestRuntimeMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := NewRuntime(reg, New(reg, "g1"), "g1")
	r.OnTxnCommitted(5*time.Millisecond, 7)
	r.OnRestoreProgress(2, 100, 50)
	r.OnKeyFilterBytes(3, 2048)
	r.OnSwept(3, 4)
	r.OnConsumerLag("in", 3, 12)
	r.OnRebalanceCompleted(300 * time.Millisecond)
	SetRetention(reg, "g1", "in", time.Hour, 0, true)
	SetRetention(reg, "g1", "in", time.Hour, 2*time.Hour, false) // a second check on the same registry
	body := scrape(t, reg)
	for _, want := range []string{
		`dedup_transactions_committed_total{group="g1"} 1`,
		`dedup_transaction_records_total{group="g1"} 7`,
		`dedup_restore_records_total{group="g1"} 100`,
		`dedup_restore_remaining_records{group="g1",partition="2"} 50`,
		`dedup_table_filter_bytes{group="g1",partition="3"} 2048`,
		`dedup_cleanup_deleted_total{group="g1"} 4`,
		`dedup_consumer_lag_records{group="g1",partition="3",topic="in"} 12`,
		`dedup_transactions_aborted_total{group="g1",reason="fenced"} 0`,
		`dedup_rebalance_duration_seconds_count{group="g1"} 1`,
		`dedup_retention_seconds{group="g1"} 3600`,
		`dedup_input_retention_seconds{group="g1",topic="in"} 7200`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// A revoked partition's series disappear; the others stay. An instance that
// kept reporting a moved partition's table would be summed with its new
// owner's.
func TestPartitionRevokedDropsItsSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := NewRuntime(reg, New(reg, "g1"), "g1")
	for _, p := range []int32{2, 3} {
		r.OnTableSize(p, 10)
		r.OnKeyFilterBytes(p, 2048)
		r.OnRestoreProgress(p, 1, 5)
		r.OnConsumerLag("in", p, 7)
		r.OnConsumerLag("g1-loop", p, 1)
	}
	r.OnPartitionRevoked(3)
	body := scrape(t, reg)
	for _, series := range []string{"dedup_table_entries", "dedup_table_filter_bytes", "dedup_restore_remaining_records",
		"dedup_consumer_lag_records"} {
		kept := series + `{group="g1",partition="2"`
		gone := series + `{group="g1",partition="3"`
		if !strings.Contains(body, kept) {
			t.Errorf("/metrics lost %s", kept)
		}
		if strings.Contains(body, gone) {
			t.Errorf("/metrics still has %s after the partition was revoked", gone)
		}
	}
}

func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	srv := httptest.NewServer(Handler(reg, func() Health { return Health{Ready: true, Live: true} }))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A standby's lag is exported while the instance holds the standby and
// dropped when it stops holding it (records < 0).
func TestStandbyLagSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := NewRuntime(reg, New(reg, "g1"), "g1")
	r.OnStandbyLag(4, 120)
	r.OnStandbyLag(5, 0)
	r.OnStandbyLag(5, -1)
	body := scrape(t, reg)
	if !strings.Contains(body, `dedup_standby_lag_records{group="g1",partition="4"} 120`) {
		t.Errorf("/metrics lacks partition 4's standby lag:\n%s", body)
	}
	if strings.Contains(body, `dedup_standby_lag_records{group="g1",partition="5"`) {
		t.Error("/metrics still has partition 5's standby lag after it was dropped")
	}
}
