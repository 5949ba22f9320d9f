package metrics

import (
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
	m.Processed(0, 20*time.Millisecond)
	m.Skipped(0)
	m.Skipped(1)
	m.DeadLettered("not-json")
	m.TableSize(3, 42)
	var ready atomic.Bool
	srv := httptest.NewServer(Handler(reg, ready.Load))
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
		`dedup_processing_latency_seconds_count{group="g1"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz = %d", code)
	}
	if code, _ := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz while recovering = %d, want 503", code)
	}
	ready.Store(true)
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("/readyz when ready = %d", code)
	}
}

// The runtime's hooks land in the exposition under their documented names.
func TestRuntimeMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := NewRuntime(reg, New(reg, "g1"), "g1")
	r.TxnCommitted(5*time.Millisecond, 7)
	r.RestoreProgress(2, 100, 50)
	r.KeyFilterBytes(3, 2048)
	r.Swept(3, 4)
	body := scrape(t, reg)
	for _, want := range []string{
		`dedup_transactions_committed_total{group="g1"} 1`,
		`dedup_transaction_records_total{group="g1"} 7`,
		`dedup_restore_records_total{group="g1"} 100`,
		`dedup_restore_remaining_records{group="g1",partition="2"} 50`,
		`dedup_table_filter_bytes{group="g1",partition="3"} 2048`,
		`dedup_cleanup_deleted_total{group="g1"} 4`,
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
		r.TableSize(p, 10)
		r.KeyFilterBytes(p, 2048)
		r.RestoreProgress(p, 1, 5)
	}
	r.PartitionRevoked(3)
	body := scrape(t, reg)
	for _, series := range []string{"dedup_table_entries", "dedup_table_filter_bytes", "dedup_restore_remaining_records"} {
		kept := series + `{group="g1",partition="2"}`
		gone := series + `{group="g1",partition="3"}`
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
	srv := httptest.NewServer(Handler(reg, func() bool { return true }))
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
