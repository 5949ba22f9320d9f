package integration

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dedupkit/dedup/internal/kafkatest"
)

// counterRE matches a counter's sample line of the exposition format.
var counterRE = regexp.MustCompile(`(?m)^(dedup_[a-z_]+_total)(\{[^}]*\})? (\S+)$`)

// scrapeCounters returns the dedup_*_total samples of a /metrics page,
// by series (name and labels as exposed).
func scrapeCounters(t *testing.T, page string) map[string]float64 {
	t.Helper()
	samples := map[string]float64{}
	for _, m := range counterRE.FindAllStringSubmatch(page, -1) {
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			t.Fatalf("sample %q: value %q (%v)", m[0], m[3], err)
		}
		samples[m[1]+m[2]] = v
	}
	if len(samples) == 0 {
		t.Fatalf("no dedup counters on /metrics:\n%s", page)
	}
	return samples
}

// inputSeries turns two scrapes of one worker into promtool input_series,
// the way Prometheus would store them: each series as scraped before for
// the first `before` minutes (absent if it was not exported yet), then as
// scraped after for `after` minutes. job and instance are the labels a
// scrape adds.
func inputSeries(before, after map[string]float64, beforeMin, afterMin int) string {
	var names []string
	for s := range after {
		names = append(names, s)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, s := range names {
		name, labels, _ := strings.Cut(s, "{")
		labels = strings.TrimSuffix(labels, "}")
		if labels != "" {
			labels = "," + labels
		}
		first := "_"
		if v, ok := before[s]; ok {
			first = strconv.FormatFloat(v, 'g', -1, 64)
		}
		fmt.Fprintf(&b, "      - series: '%s{job=\"dedup\",instance=\"worker:8080\"%s}'\n        values: '%sx%d %sx%d'\n",
			name, labels, first, beforeMin-1, strconv.FormatFloat(after[s], 'g', -1, 64), afterMin-1)
	}
	return b.String()
}

// ruleAnnotation returns an annotation of an alert as rules.yml writes it.
func ruleAnnotation(t *testing.T, rules, alert, key string) string {
	t.Helper()
	_, block, ok := strings.Cut(rules, "- alert: "+alert+"\n")
	if !ok {
		t.Fatalf("no alert %s in rules.yml", alert)
	}
	block, _, _ = strings.Cut(block, "- alert: ")
	m := regexp.MustCompile(`(?m)^\s+` + key + `: (.*)$`).FindStringSubmatch(block)
	if m == nil {
		t.Fatalf("alert %s has no %s", alert, key)
	}
	return m[1]
}

// promtool runs the promtool that internal/tools/go.mod pins.
func promtool(t *testing.T, args ...string) (string, error) {
	t.Helper()
	tools, err := filepath.Abs("../internal/tools/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", append([]string{"tool", "-modfile=" + tools, "promtool"}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// DedupDeadLettersRising fires for the first dead letter of a reason in a
// worker's life, on the series a real worker exports: two scrapes of a
// worker on the real broker, before and after one undecodable record, are
// the input of a promtool rules test. Had the worker created the series at
// 1 with that dead letter, increase() over it would be 0 and the alert
// would stay silent.
func TestDeadLettersRisingFiresOnAScrapedWorker(t *testing.T) {
	e := newEnv(t, 1)
	group := e.group("alert")
	p := startProc(t, buildProcessor(t), workerArgs(e, group, t.TempDir(), "--commit-interval", "50ms")...)
	e.produce(events("alert", 1)...)
	p.waitMetric("dedup_events_processed_total", 60*time.Second, func(v float64) bool { return v >= 1 })
	before := scrapeCounters(t, get(t, p.base+"/metrics"))

	e.produce(kafkatest.Record{Key: "k", Value: []byte("not json")})
	p.waitMetric("dedup_dead_lettered_total", 30*time.Second, func(v float64) bool { return v >= 1 })
	after := scrapeCounters(t, get(t, p.base+"/metrics"))
	if after[`dedup_dead_lettered_total{group="`+group+`",reason="not-json"}`] != 1 {
		t.Fatalf("after one undecodable record, want dedup_dead_lettered_total{reason=\"not-json\"} 1; scraped %v", after)
	}

	rulesPath, err := filepath.Abs("../deploy/prometheus/rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := os.ReadFile(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	const alert = "DedupDeadLettersRising"
	test := fmt.Sprintf(`rule_files:
  - %s
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
%s    alert_rule_test:
      - eval_time: 4m
        alertname: %[3]s
        exp_alerts: []
      - eval_time: 8m
        alertname: %[3]s
        exp_alerts:
          - exp_labels: {severity: warning, job: dedup, group: %[4]s, reason: not-json}
            exp_annotations:
              summary: "group %[4]s: 1 records dead-lettered (not-json) in 10 minutes"
              description: %[5]s
              runbook_url: %[6]s
`, rulesPath, inputSeries(before, after, 5, 15), alert, group,
		ruleAnnotation(t, string(rules), alert, "description"), ruleAnnotation(t, string(rules), alert, "runbook_url"))
	file := filepath.Join(t.TempDir(), "scraped_test.yml")
	if err := os.WriteFile(file, []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := promtool(t, "test", "rules", file); err != nil {
		t.Fatalf("promtool test rules: %v\n%s\ntest file:\n%s", err, out, test)
	}
}
