package harness

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/dedupkit/dedup/bench/contenders"
)

// The Kafka Streams application's store and repartition names
// (bench/kstreams): its internal topics are <group>-table-changelog and
// <group>-loop-repartition, deleted after each run like the worker's.
const (
	kstreamsStore       = "table"
	kstreamsRepartition = "loop"
)

// buildKStreams builds the Kafka Streams contender's jar when a selected
// contender needs it and it is missing or stale, before anything is timed,
// and records the JVM's version for the report.
func (h *harness) buildKStreams(ctx context.Context, rep *Report) error {
	need := false
	for _, ct := range h.cfg.selected() {
		need = need || ct.Kind == contenders.KStreams
	}
	if !need {
		return nil
	}
	if _, err := contenders.BuildKStreams(ctx, logWriter(func(s string) { h.cfg.logf("%s", strings.TrimSpace(s)) })); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	rep.Versions["kstreams"] = fmt.Sprintf("Kafka Streams %s on %s, JVM flags %s",
		contenders.KStreamsVersion, javaVersion(ctx), strings.Join(contenders.KStreamsJVMFlags, " "))
	return nil
}

// javaVersion is the runtime line of `java -version`.
func javaVersion(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "java", "-version").CombinedOutput()
	if err != nil {
		return "java (version unknown)"
	}
	// The runtime line: "OpenJDK Runtime Environment (build 17.0.15+6-...)".
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(lines[min(1, len(lines)-1)])
}

// kstreamsPeer is the Kafka Streams row an exactly-once worker row is set
// against: the local store for --rekey=never, the repartition topic for the
// default re-keying.
func kstreamsPeer(ct Contender) string {
	if ct.Rekey == "never" {
		return "kstreams"
	}
	return "kstreams-repartition"
}

// Comparison is one exactly-once worker row next to its Kafka Streams peer:
// each figure as worker / Kafka Streams (above 1 is more throughput, but
// more CPU, memory or latency).
type Comparison struct {
	Worker, Peer *Summary
	// Cold: over the whole run; warm: after the first fifth of the outputs.
	Throughput, WarmThroughput float64
	CPUPerM, WarmCPUPerM       float64
	PeakRSS                    float64
	P99                        float64
}

// KStreamsComparisons sets every measured exactly-once worker row against
// its measured Kafka Streams peer; a figure either side lacks is 0.
func (r *Report) KStreamsComparisons() []Comparison {
	sums := r.Summaries()
	var out []Comparison
	for i := range sums {
		w := &sums[i]
		if w.Contender.Kind != contenders.Exactly || w.Runs == 0 {
			continue
		}
		peer := find(sums, kstreamsPeer(w.Contender))
		if peer == nil || peer.Runs == 0 {
			continue
		}
		c := Comparison{Worker: w, Peer: peer,
			Throughput: ratio(w.Throughput, peer.Throughput), WarmThroughput: ratio(w.WarmThroughput, peer.WarmThroughput),
			CPUPerM: ratio(w.CPUPerM, peer.CPUPerM), WarmCPUPerM: ratio(w.WarmCPUPerM, peer.WarmCPUPerM),
			PeakRSS: ratio(float64(w.PeakRSS), float64(peer.PeakRSS))}
		if w.Latency != nil && peer.Latency != nil && len(w.Latency.Latencies) > 0 && len(peer.Latency.Latencies) > 0 {
			c.P99 = ratio(float64(w.Latency.Percentile(0.99)), float64(peer.Latency.Percentile(0.99)))
		}
		out = append(out, c)
	}
	return out
}

func ratio(a, b float64) float64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	return a / b
}

// cell is "1.23x (a vs b)", or "-" when either side is missing.
func cell(x float64, a, b string) string {
	if x == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx (%s vs %s)", x, a, b)
}

func p99Text(s *Summary) string {
	if s.Latency == nil || len(s.Latency.Latencies) == 0 {
		return "-"
	}
	return durMS(s.Latency.Percentile(0.99))
}

// kstreamsSection writes the worker-vs-Kafka-Streams table of the doc.
func (r *Report) kstreamsSection(p func(string, ...any)) {
	cmp := r.KStreamsComparisons()
	if len(cmp) == 0 {
		return
	}
	p("## Next to Kafka Streams")
	p("")
	p("Each exactly-once row of this worker as a ratio to the Kafka Streams application doing the same job")
	p("(`kstreams` for `--rekey=never`, `kstreams-repartition` for the default re-keying): worker / Kafka Streams,")
	p("so above 1 is more throughput, or more CPU, memory or latency. Cold is the whole measured run (from READY);")
	p("warm starts once a fifth of the distinct events is visible (JIT compilation, caches and the first fetches")
	p("behind) and counts the input not yet output then. CPU is the contender process only (the JVM for Kafka")
	p("Streams), per 1M input events, of the median run; p99 is the latency run's.")
	p("")
	p("| worker row | vs | events/s cold | events/s warm | CPU s / 1M cold | CPU s / 1M warm | peak RSS | p99 latency |")
	p("|---|---|---:|---:|---:|---:|---:|---:|")
	for _, c := range cmp {
		w, k := c.Worker, c.Peer
		p("| %s | %s | %s | %s | %s | %s | %s | %s |", w.Contender.Name, k.Contender.Name,
			cell(c.Throughput, fmt.Sprintf("%.0f", w.Throughput), fmt.Sprintf("%.0f", k.Throughput)),
			cell(c.WarmThroughput, fmt.Sprintf("%.0f", w.WarmThroughput), fmt.Sprintf("%.0f", k.WarmThroughput)),
			cell(c.CPUPerM, fmt.Sprintf("%.1f", w.CPUPerM), fmt.Sprintf("%.1f", k.CPUPerM)),
			cell(c.WarmCPUPerM, fmt.Sprintf("%.1f", w.WarmCPUPerM), fmt.Sprintf("%.1f", k.WarmCPUPerM)),
			cell(c.PeakRSS, mib(w.PeakRSS), mib(k.PeakRSS)),
			cell(c.P99, p99Text(w), p99Text(k)))
	}
	p("")
}

// printKStreams writes the same ratios to the console table ("-" where a
// side lacks the figure, as a warm interval the toy-sized smoke may not have).
func (r *Report) printKStreams(w func(string, ...any)) {
	x := func(v float64) string {
		if v == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", v)
	}
	for _, c := range r.KStreamsComparisons() {
		w("vs %s: %-30s events/s %s (warm %s)  CPU/1M %s (warm %s)  peak RSS %s  p99 %s\n", c.Peer.Contender.Name,
			c.Worker.Contender.Name, x(c.Throughput), x(c.WarmThroughput), x(c.CPUPerM), x(c.WarmCPUPerM), x(c.PeakRSS), x(c.P99))
	}
}

// kstreamsMethod is the method bullet on how Kafka Streams runs.
func kstreamsMethod(p func(string, ...any), commit time.Duration) {
	p("- **Kafka Streams** (`kstreams`, `kstreams-repartition`): the same job as a Kafka Streams %s application,", contenders.KStreamsVersion)
	p("  one Java file (`bench/kstreams`, built with `mvn -q -B package` by the harness when missing or stale):")
	p("  the event ID is the top-level JSON `eventId` (read as the worker's default decoder does), seen IDs in a")
	p("  persistent RocksDB key-value store with its changelog (Kafka Streams' default RocksDB settings), the")
	p("  first copy forwarded with its key, value and headers, `processing.guarantee=exactly_once_v2`,")
	p("  `commit.interval.ms=%d` (the worker's), one stream thread, no standby replicas, other settings", commit.Milliseconds())
	p("  default. `kstreams` dedups in its input partition's store (as `--rekey=never`); `kstreams-repartition`")
	p("  runs `selectKey(eventId).repartition()` first (as the default re-keying). The contender process execs")
	p("  `java %s -jar bench/kstreams/target/dedup-kstreams.jar`, so its CPU and RSS are the JVM's; the heap", strings.Join(contenders.KStreamsJVMFlags, " "))
	p("  holds only records in flight (the seen IDs are off-heap in RocksDB), so 1 GiB is room, not a limit.")
	p("  READY is printed when the application reaches RUNNING.")
}
