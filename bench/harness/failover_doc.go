package harness

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/dedupkit/dedup/bench/chart"
)

// failoverPNG is the chart of the doc at path: beside it, named after it,
// so that runs written to two docs keep a chart each.
func failoverPNG(doc string) string {
	return strings.TrimSuffix(filepath.Base(doc), ".md") + ".png"
}

func (r *FailoverReport) result(contender, scenario string) *ScenarioResult {
	for i := range r.Results {
		if r.Results[i].Contender == contender && r.Results[i].Scenario == scenario {
			return &r.Results[i]
		}
	}
	return nil
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

// gapCell is "p50 / max" of ds, or why there is none.
func gapCell(res *ScenarioResult, ds []time.Duration) string {
	switch {
	case res == nil:
		return "not run"
	case len(ds) == 0 && res.Err != "":
		return "failed"
	case len(ds) == 0:
		return "-"
	}
	p50, top := quantiles(ds)
	s := secs(p50) + " / " + secs(top)
	if !res.Clean() {
		s += " (failed)"
	}
	return s
}

// tableLines is the figures' table in markdown: a row per scenario (and
// per stall figure), a column per contender.
func (r *FailoverReport) tableLines() []string {
	cts, scs := r.Config.selected()
	head := "| event (gap: p50 / max) |"
	rule := "|---|"
	for _, ct := range cts {
		head += " " + r.Config.columnLabel(ct) + " |"
		rule += "---:|"
	}
	lines := []string{head, rule}
	for _, sc := range scs {
		gap, stall := "| "+sc.Label+" |", "| "+sc.Label+": longest stall of the partitions that did not move |"
		pause := "| " + sc.Label + ": longest pause of the partitions that moved |"
		handover := "| " + sc.Label + ": until it also holds its share of the tables |"
		handoverPause := "| " + sc.Label + ": longest pause of the tables' partitions handed over |"
		for _, ct := range cts {
			res := r.result(ct.Name, sc.Name)
			var gaps, stalls, pauses, handovers, handoverPauses []time.Duration
			if res != nil {
				gaps, stalls, pauses, handovers, handoverPauses = res.Gaps, res.Stalls, res.Pauses, res.Handovers, res.HandoverPauses
			}
			gap += " " + gapCell(res, gaps) + " |"
			stall += " " + gapCell(res, stalls) + " |"
			pause += " " + gapCell(res, pauses) + " |"
			if ct.Handover {
				handover += " " + gapCell(res, handovers) + " |"
				handoverPause += " " + gapCell(res, handoverPauses) + " |"
			} else {
				handover += " not measured (a probing rebalance, 10 min later by default) |"
				handoverPause += " - |"
			}
		}
		lines = append(lines, gap)
		if sc.Pause {
			lines = append(lines, pause)
		}
		if sc.Handover {
			lines = append(lines, handover, handoverPause)
		}
		if sc.Stall {
			lines = append(lines, stall)
		}
	}
	return lines
}

// PrintTable writes the figures and each scenario's exactly-once check.
func (r *FailoverReport) PrintTable(w io.Writer) {
	for _, l := range r.tableLines() {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w)
	for _, res := range r.Results {
		c := res.Correct
		fmt.Fprintf(w, "%s %s: gaps %v; %d records in, %d events expected, %d outputs, %d missing, %d duplicated, %d foreign %s\n",
			res.Contender, res.Scenario, roundAll(res.Gaps), res.Produced, c.Expected, c.Outputs, c.Missing, c.Duplicates, c.Foreign, res.Err)
	}
}

func roundAll(ds []time.Duration) []string {
	var out []string
	for _, d := range ds {
		out = append(out, secs(d))
	}
	return out
}

// WriteDoc writes docs/benchmarks-failover.md and its chart.
func (r *FailoverReport) WriteDoc() error {
	c := r.Config
	if c.Doc == "" {
		return nil
	}
	chartDir := c.ChartDir
	if chartDir == "" {
		chartDir = filepath.Dir(c.Doc)
	}
	if err := os.MkdirAll(chartDir, 0o755); err != nil {
		return err
	}
	if err := r.writeChart(filepath.Join(chartDir, failoverPNG(c.Doc))); err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(c.Doc), chartDir)
	if err != nil {
		rel = chartDir
	}
	return os.WriteFile(c.Doc, []byte(r.markdown(filepath.ToSlash(rel))), 0o644)
}

func (r *FailoverReport) writeChart(path string) error {
	cts, scs := r.Config.selected()
	var bars []chart.Bar
	for _, sc := range scs {
		for _, ct := range cts {
			res := r.result(ct.Name, sc.Name)
			if res == nil || len(res.Gaps) == 0 {
				continue
			}
			p50, top := quantiles(res.Gaps)
			label := sc.Label + ": " + ct.Label
			bars = append(bars, chart.Bar{Label: label + " p50", Value: p50.Seconds(), Text: secs(p50)},
				chart.Bar{Label: label + " max", Value: top.Seconds(), Text: secs(top)})
		}
	}
	if len(bars) == 0 {
		return nil
	}
	title := fmt.Sprintf("Failover gap: event until every affected partition commits again (%s IDs, %d events each)",
		humanCount(r.Config.IDs), r.Config.Repeat)
	return chart.Bars(path, title, "seconds", bars)
}

func (r *FailoverReport) markdown(chartRel string) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	c, m := r.Config, r.Machine
	p("# Benchmarks: the pause after a failure or a deploy")
	p("")
	p("Generated by `%s` on %s (took %s) at commit %s. Every figure below comes from that one run.",
		c.Command, r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Finished.Sub(r.Started).Round(time.Second), r.Commit)
	p("Machine: %d cores (%s), %s, Linux %s; %s, on the same machine as everything else.", m.CPUs, m.CPUModel, m.MemTotal, m.Kernel, m.Kafka)
	p("")
	for _, l := range r.tableLines() {
		p("%s", l)
	}
	p("")
	p("![failover gaps](%s/%s)", chartRel, failoverPNG(r.Config.Doc))
	p("")
	p("## What happens")
	p("")
	p("- %d instances of the contender in one group (each its own process, static instance ID and state dir, so a", c.Instances)
	p("  restart keeps its identity and its disk), an input of %d partitions, session timeout %s, commit interval %s.", c.Partitions, c.SessionTimeout, c.CommitInterval)
	p("- The table holds %d seen IDs before the measurement, written straight to the changelog every instance restores", c.IDs)
	p("  its partitions from at start: the table the group would have after processing that many distinct events, without")
	p("  the time that takes. For the worker that is `<group>-table`, keyed like the worker keys them; for Kafka Streams")
	p("  `<group>-table-changelog`, String keys and Long values in the partition its producer's murmur2 picks for the key.")
	p("- A steady load of %d events/s (%.0f%% duplicates, late ones 5-30 s after the original) runs through every scenario.", c.Rate, 100*c.DupRate)
	p("- Each event happens %d times per scenario; the victim rotates over the instances. Between events the group", c.Repeat)
	p("  goes back to rest (the victim restarted, the extra instance stopped) and is awaited Stable, with every partition")
	p("  committing again, and an instance that keeps standby replicas has them caught up (it writes how many are")
	p("  behind to a file the harness reads). Scale out starts the 4th instance on an empty state dir each time.")
	p("- Every %s the harness reads the group's committed offsets (ListConsumerGroupOffsets), its members and their", c.PollInterval)
	p("  assignments (DescribeConsumerGroups) and the partitions' log end offsets: only the group protocol, so any")
	p("  consumer-group contender is measured the same way. Partitions are those of every topic the group consumes")
	p("  (for the worker: the input and its re-key topic `<group>-loop`, whose partition p goes with the table of p;")
	p("  partition p of the input goes with it too, except that with standby replicas a new instance consumes the")
	p("  input partitions of the tables it warms up at once and forwards to their old owner what they judge; for Kafka")
	p("  Streams: the input, whose tasks keep no state, and `<group>-loop-repartition`, whose tasks keep the store,")
	p("  assigned each on its own).")
	p("- **Gap**: from the event until every affected partition (owned by the stopped instance, or whose owner")
	p("  changed) has a committed offset beyond the one it had when its new (or restarted) owner took it over, the")
	p("  group Stable. An old owner's last commit on its way out does not count. Scale out's event is the join: the")
	p("  first sample where the group left its rest, not the process start. Resolution: the sampling interval.")
	p("  The group counts as Stable only once every member holds at least half its share of the partitions, so a")
	p("  contender that lets a new member warm up before handing partitions over is measured until it did.")
	p("- **Pause of the partitions that moved**: the longest time one of the affected partitions went without its")
	p("  committed offset advancing while records waited beyond it, from the event until the gap was over. After a")
	p("  stop it is about the gap; when a new owner warms up first, the old owner processes the partition meanwhile,")
	p("  and the pause is the hand-over alone.")
	p("- **Until it also holds its share of the tables** (scale out): from the join until the new instance holds at")
	p("  least its share (12 partitions over 4 instances: 3) of every topic the group consumes, the group Stable, and")
	p("  each of those partitions committed again under it: for the worker with standby replicas, once its warm-ups")
	p("  caught up and it rejoined. Its pause is the longest pause of those partitions meanwhile. Kafka Streams")
	p("  moves its stateful tasks at a probing rebalance, 10 min after the join by default, which is not awaited.")
	p("- **Stall of the partitions that did not move**: the longest time one of them went without its committed offset")
	p("  advancing while records waited beyond it, from the event until the group was Stable again and the gap over.")
	p("- After each scenario the load stops and the output is checked: every event of the records written comes out")
	p("  exactly once (read_committed, by the `bench-rec` header, as in docs/benchmarks.md).")
	p("")
	p("## Per scenario")
	p("")
	p("| contender | scenario | gaps | pauses of moved | stalls of unmoved | tables held | affected partitions | records in | events | outputs | missing | duplicated | error |")
	p("|---|---|---|---|---|---|---|---:|---:|---:|---:|---:|---|")
	for _, res := range r.Results {
		cr := res.Correct
		p("| %s | %s | %s | %s | %s | %s | %v | %d | %d | %d | %d | %d | %s |", res.Contender, res.Scenario, strings.Join(roundAll(res.Gaps), ", "),
			strings.Join(roundAll(res.Pauses), ", "), strings.Join(roundAll(res.Stalls), ", "), strings.Join(roundAll(res.Handovers), ", "),
			res.Affected, res.Produced, cr.Expected, cr.Outputs, cr.Missing, cr.Duplicates, strings.ReplaceAll(res.Err, "\n", " "))
	}
	p("")
	p("Go %s; load average at the start: %s.", strings.TrimPrefix(m.Go, "go"), m.LoadAvg)
	return b.String()
}

// gitCommit names the checkout the benchmark runs in (make runs it at the
// repository's root), "unknown" outside one.
func gitCommit() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty", "--abbrev=12").Output()
	if err != nil {
		return "unknown"
	}
	return "`" + strings.TrimSpace(string(out)) + "`"
}
