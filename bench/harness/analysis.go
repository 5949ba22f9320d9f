package harness

import (
	"bytes"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"text/template"
)

// profileShares parses `go tool pprof -top -cum` of profile: each
// function's cumulative share of the samples, in percent.
func profileShares(profile string) (map[string]float64, error) {
	out, err := exec.Command("go", "tool", "pprof", "-top", "-cum", "-nodecount=600", profile).Output()
	if err != nil {
		return nil, fmt.Errorf("go tool pprof: %w", err)
	}
	shares := map[string]float64{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.HasSuffix(f[4], "%") {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSuffix(f[4], "%"), 64)
		if err != nil {
			continue
		}
		name := strings.Join(f[5:], " ")
		name = strings.TrimSuffix(strings.TrimSuffix(name, " (inline)"), " (partial-inline)")
		shares[name] = max(shares[name], v)
	}
	return shares, nil
}

// docData is what analysis.md's template sees: the figures of this run.
type docData struct{ r *Report }

func (d docData) sum(name string) *Summary { return find(d.r.Summaries(), name) }

// Share is a function's cumulative share of the profiled worker's CPU.
func (d docData) Share(fn string) string {
	if len(d.r.ProfileShares) == 0 {
		return "n/a"
	}
	v, ok := d.r.ProfileShares[fn]
	if !ok {
		return "under 1%" // pprof drops nodes below half a percent
	}
	return fmt.Sprintf("%.0f%%", v)
}

// Tput is a contender's median throughput.
func (d docData) Tput(name string) string {
	if s := d.sum(name); s != nil && s.Throughput > 0 {
		return fmt.Sprintf("%.0f events/s", s.Throughput)
	}
	return "n/a"
}

// Ratio is a's throughput over b's.
func (d docData) Ratio(a, b string) string {
	sa, sb := d.sum(a), d.sum(b)
	if sa == nil || sb == nil || sb.Throughput == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1fx", sa.Throughput/sb.Throughput)
}

// CPU is a contender's CPU seconds per 1M input events.
func (d docData) CPU(name string) string {
	if s := d.sum(name); s != nil && s.Runs > 0 {
		return fmt.Sprintf("%.0f s", s.CPUPerM)
	}
	return "n/a"
}

// P is a latency percentile (50, 99, 100) of a contender.
func (d docData) P(name string, q float64) string {
	if s := d.sum(name); s != nil && s.Latency != nil && len(s.Latency.Latencies) > 0 {
		return durMS(s.Latency.Percentile(q / 100))
	}
	return "n/a"
}

// CommitShare is the share of the median exactly-once run's measured time
// its processing loop spent committing.
func (d docData) CommitShare(name string) string {
	var runs []RunResult
	for _, r := range d.r.Runs {
		if r.Contender == name && r.Commits > 0 && r.Seconds > 0 {
			runs = append(runs, r)
		}
	}
	if len(runs) == 0 {
		return "n/a"
	}
	var total, secs float64
	var n, recs int
	for _, r := range runs {
		total += r.CommitSeconds
		secs += r.Seconds
		n += r.Commits
		recs += r.CommitRecords
	}
	return fmt.Sprintf("%.0f%% (%d transactions of %.0f records on average)", 100*total/secs, n, float64(recs)/float64(n))
}

// InboxTimes is where an inbox contender's database time went in its
// median run.
func (d docData) InboxTimes(name string) string {
	if s := d.sum(name); s != nil && s.Inbox.Events > 0 {
		return strings.TrimPrefix(inboxTimesText(s.Inbox), "database: ")
	}
	return "n/a"
}

// RestoreRate is the measured restore rate.
func (d docData) RestoreRate() string {
	if rs := d.r.Restore; rs != nil && rs.Rate > 0 {
		return fmt.Sprintf("%.0f records/s", rs.Rate)
	}
	return "n/a"
}

// HoldRSS is the RSS while holding the seen IDs.
func (d docData) HoldRSS() string {
	if h := d.r.Hold; h != nil && h.RSSAfter > 0 {
		return fmt.Sprintf("%s holding %d IDs (peak %s)", mib(h.RSSAfter), h.Records, mib(h.PeakRSS))
	}
	return "n/a"
}

// renderAnalysis fills analysis.md's template with this run's figures.
func (r *Report) renderAnalysis() string {
	t, err := template.New("analysis").Parse(analysis)
	if err != nil {
		return "analysis template: " + err.Error()
	}
	var b bytes.Buffer
	if err := t.Execute(&b, docData{r}); err != nil {
		return "analysis template: " + err.Error()
	}
	return b.String()
}
