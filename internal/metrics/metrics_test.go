package metrics

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupkit/dedup"
)

// Every counter with a label that an alert or a dashboard panel takes the
// increase() or rate() of is exported at 0 for each label value from the
// start: a series the first event creates starts at 1, and its increase
// stays 0.
func TestLabelledCountersStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewRuntime(reg, New(reg, "g"), "g")
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]map[string]float64{} // metric -> label value -> value
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "group" {
					continue
				}
				if exported[f.GetName()] == nil {
					exported[f.GetName()] = map[string]float64{}
				}
				exported[f.GetName()][l.GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	tests := []struct {
		metric string
		values []string
	}{
		{"dedup_dead_lettered_total", dedup.DeadLetterReasons()},
		{"dedup_transactions_aborted_total", []string{"fenced", "error", "interrupted"}},
		{"dedup_table_opens_total", []string{"kept", "opened"}},
	}
	for _, tt := range tests {
		t.Run(tt.metric, func(t *testing.T) {
			got := exported[tt.metric]
			for _, v := range tt.values {
				if n, ok := got[v]; !ok || n != 0 {
					t.Errorf("%s{%q}: exported %t, value %v; want exported at 0", tt.metric, v, ok, n)
				}
			}
			for v := range got {
				if !slices.Contains(tt.values, v) {
					t.Errorf("%s{%q} is exported but is no known label value", tt.metric, v)
				}
			}
		})
	}
}
