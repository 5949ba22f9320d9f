package integration

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/kafkatest"
	"github.com/dedupkit/dedup/processor"
)

// queriedMetrics is every metric name the Grafana dashboards' expressions
// and the alert rules query (the worker's dedup_ metrics, and the Go and
// process collectors' go_ and process_ ones), with the files that query it.
func queriedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	nameRE := regexp.MustCompile(`\b(?:dedup|go|process)_[a-z_]+\b`)
	exprRE := regexp.MustCompile(`"expr":\s*"((?:[^"\\]|\\.)*)"`) // the dashboards' queries, not their titles
	names := map[string][]string{}
	add := func(file, text string) {
		for _, n := range nameRE.FindAllString(text, -1) {
			if !slices.Contains(names[n], file) {
				names[n] = append(names[n], file)
			}
		}
	}
	dashboards, err := filepath.Glob("../deploy/grafana/*.json")
	if err != nil || len(dashboards) == 0 {
		t.Fatalf("no dashboards in deploy/grafana (%v)", err)
	}
	for _, f := range append(dashboards, "../deploy/prometheus/rules.yml") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".json") {
			for _, m := range exprRE.FindAllStringSubmatch(string(b), -1) {
				add(f, m[1])
			}
		} else {
			add(f, string(b))
		}
	}
	if len(names) < 10 {
		t.Fatalf("found only %d metric names in the dashboards and rules: %v", len(names), names)
	}
	return names
}

// Every metric a dashboard panel or an alert rule queries is on a running
// worker's /metrics: a renamed metric would leave a panel empty and an alert
// silent without any error. Histograms are queried by their _bucket, _sum
// and _count series, which the exposition names as such.
func TestDashboardAndAlertMetricsExist(t *testing.T) {
	queried := queriedMetrics(t)
	e := newEnv(t, 2)
	group := e.group("obs")
	p := startProc(t, buildProcessor(t), workerArgs(e, group, t.TempDir(), "--commit-interval", "50ms")...)
	e.produce(append(events("obs", 20), kafkatest.Record{Key: "k", Value: []byte("not json")})...)
	p.waitMetric("dedup_events_processed_total", 60*time.Second, func(v float64) bool { return v >= 20 })
	p.waitMetric("dedup_dead_lettered_total", 30*time.Second, func(v float64) bool { return v >= 1 })
	p.waitMetric("dedup_consumer_lag_records", 30*time.Second, func(v float64) bool { return v == 0 })

	exposed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^((?:dedup|go|process)_[a-z_]+)[{ ]`).FindAllStringSubmatch(get(t, p.base+"/metrics"), -1) {
		exposed[m[1]] = true
	}
	for name, files := range queried {
		if !exposed[name] {
			t.Errorf("%s, queried by %v, is not on /metrics", name, files)
		}
	}
	t.Logf("%d queried metrics, all exposed", len(queried))
}

// dedup_consumer_lag_records rises while the input comes faster than the
// handler takes it, grows with a second burst, and is back to 0 once all is
// processed. The handler takes 20 ms an event, so 100 events a partition
// take 2 s and every one-second report sees the lag.
func TestConsumerLagMetricMoves(t *testing.T) {
	e := newEnv(t, 2)
	group := e.group("lag")
	topo := e.slowTopology(group)
	reg := prometheus.NewRegistry()
	w := e.startEOS(topo, processor.Config{StateDir: t.TempDir(), Registerer: reg})
	lag, waitLag := lagOf(t, reg, e.input)
	// A claim reports its lag from its start, its table's restore included
	// (the lag a long restore builds up shows), so readiness is awaited apart.
	waitLag("both partitions assigned, lag 0", 60*time.Second, func(sum float64, series int) bool { return series == 2 && sum == 0 })
	until(t, 60*time.Second, "the worker to be ready", w.ready)

	e.produce(events("burst1", 200)...)
	first := waitLag("the first burst to show", 10*time.Second, func(sum float64, _ int) bool { return sum > 0 })
	e.produce(events("burst2", 400)...)
	second := waitLag("the second burst to raise the lag", 10*time.Second, func(sum float64, _ int) bool { return sum > first })
	t.Logf("lag after the first burst %v, after the second %v", first, second)
	waitLag("everything processed, lag 0", 60*time.Second, func(sum float64, _ int) bool { return sum == 0 })
	e.waitProcessed(group)
	e.exactlyOnce(append(events("burst1", 200), events("burst2", 400)...))

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "dedup_rebalance_duration_seconds" {
			h := f.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() < 1 {
				t.Errorf("no rebalance duration observed")
			}
			t.Logf("rebalance durations: %d, %.3f s in all", h.GetSampleCount(), h.GetSampleSum())
		}
	}
	// Closing the tables drops the partitions' lag series, as a revocation does.
	w.stop(t)
	if sum, series := lag(); series != 0 {
		t.Errorf("%d lag series (sum %v) left after the worker stopped", series, sum)
	}
}

// lagOf reads dedup_consumer_lag_records of topic on reg: lag sums its
// series, waitLag waits up to timeout for cond on them and returns the sum.
func lagOf(t *testing.T, reg prometheus.Gatherer, topic string) (lag func() (sum float64, series int),
	waitLag func(what string, timeout time.Duration, cond func(sum float64, series int) bool) float64) {
	lag = func() (sum float64, series int) {
		for _, v := range consumerLag(t, reg)[topic] {
			sum += v
			series++
		}
		return sum, series
	}
	waitLag = func(what string, timeout time.Duration, cond func(sum float64, series int) bool) float64 {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for {
			sum, series := lag()
			if cond(sum, series) {
				return sum
			}
			if time.Now().After(deadline) {
				t.Fatalf("consumer lag of %s: %v over %d partitions; waited %v for %s", topic, sum, series, timeout, what)
			}
			time.Sleep(50 * time.Millisecond) // polling the worker's reports
		}
	}
	return lag, waitLag
}

// consumerLag is dedup_consumer_lag_records on reg by topic and partition.
func consumerLag(t *testing.T, reg prometheus.Gatherer) map[string]map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	lag := map[string]map[string]float64{}
	for _, f := range families {
		if f.GetName() != "dedup_consumer_lag_records" {
			continue
		}
		for _, m := range f.GetMetric() {
			var topic, partition string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "topic":
					topic = l.GetValue()
				case "partition":
					partition = l.GetValue()
				}
			}
			if lag[topic] == nil {
				lag[topic] = map[string]float64{}
			}
			lag[topic][partition] = m.GetGauge().GetValue()
		}
	}
	return lag
}

// A caught-up member's lag is 0 on the input, written without transactions
// here, and 1 on each loop partition: the loop topic is written in
// transactions, and the commit marker after the last record takes an offset.
// Two members in one process loop the events whose key hashes to the other's
// partition.
func TestConsumerLagOfTheLoopTopic(t *testing.T) {
	e := newEnv(t, 2)
	group := e.group("looplag")
	reg := prometheus.NewRegistry()
	e.startEOS(e.topology(group, nil), processor.Config{StateDir: t.TempDir(), Registerer: reg, Threads: 2})
	loop := group + "-loop"
	deadline := time.Now().Add(60 * time.Second)
	for lag := consumerLag(t, reg); len(lag[e.input]) < 2 || len(lag[loop]) < 2; lag = consumerLag(t, reg) {
		if time.Now().After(deadline) {
			t.Fatalf("want the lag of 2 input and 2 loop partitions, got %v", lag)
		}
		time.Sleep(100 * time.Millisecond) // polling the members' reports
	}
	e.produce(events("looplag", 200)...)
	e.waitProcessed(group)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "dedup_events_rekeyed_total" && f.GetMetric()[0].GetCounter().GetValue() == 0 {
			t.Fatal("no event went through the loop topic")
		}
	}
	want := map[string]map[string]float64{e.input: {"0": 0, "1": 0}, loop: {"0": 1, "1": 1}}
	deadline = time.Now().Add(10 * time.Second) // reported every second
	for lag := consumerLag(t, reg); !reflect.DeepEqual(lag, want); lag = consumerLag(t, reg) {
		if time.Now().After(deadline) {
			t.Fatalf("lag once all was committed: %v, want %v", lag, want)
		}
		time.Sleep(100 * time.Millisecond) // polling the members' reports
	}
}

// slowTopology forwards each event after 20 ms, so 100 events a partition
// take 2 s and every one-second lag report sees them wait.
func (e *env) slowTopology(group string) *dedup.Topology {
	topo := e.topology(group, nil)
	topo.Handler = dedup.HandlerFunc(func(_ context.Context, ev *dedup.Event) ([]dedup.Message, error) {
		time.Sleep(20 * time.Millisecond) // a slow handler, the point of the tests
		return []dedup.Message{{Key: ev.Key, Value: ev.Value, Headers: ev.Headers}}, nil
	})
	return topo
}
