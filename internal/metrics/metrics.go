// Package metrics exports the dedup outcomes to Prometheus. It implements
// dedup.Observer on a registry the caller injects, so tests and embedders
// can use their own registry and nothing is global.
package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/buildinfo"
)

// Metrics is a dedup.Observer backed by Prometheus collectors.
type Metrics struct {
	processed   prometheus.Counter
	skipped     prometheus.Counter
	expired     prometheus.Counter
	tooOld      prometheus.Counter
	deadLetters *prometheus.CounterVec
	handlerErrs prometheus.Counter
	rekeyed     prometheus.Counter
	entries     *prometheus.GaugeVec
	lag         *prometheus.GaugeVec
	age         prometheus.Histogram
	latency     prometheus.Histogram // deprecated name of age
}

// New registers the dedup metrics of one consumer group on reg, and
// dedup_build_info once per registry.
func New(reg prometheus.Registerer, group string) *Metrics {
	labels := prometheus.Labels{"group": group}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "dedup", Name: name, Help: help, ConstLabels: labels})
	}
	m := &Metrics{
		processed:   counter("events_processed_total", "First-seen events handled and marked seen."),
		skipped:     counter("duplicates_skipped_total", "Duplicates within the retention, skipped without output."),
		expired:     counter("expired_reprocessed_total", "Events whose seen record had expired, processed again."),
		tooOld:      counter("events_too_old_total", "Unseen events older than the retention: the table cannot judge them."),
		handlerErrs: counter("handler_errors_total", "Failed handler attempts (retries included)."),
		rekeyed:     counter("events_rekeyed_total", "Events looped to the partition of their dedup key (not those judged at once by the member that owns it)."),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "dedup", Name: "dead_lettered_total",
			Help: "Records written to the dead-letter topic, by reason.", ConstLabels: labels}, []string{"reason"}),
		entries: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "dedup", Name: "table_entries",
			Help: "Seen records in the local dedup table, by partition.", ConstLabels: labels}, []string{"partition"}),
		// Both runtimes report it; what each takes for the high-water mark
		// and the next offset is in docs/operations.md, "Consumer lag".
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "dedup", Name: "consumer_lag_records",
			Help: "Records of an input or loop partition this instance holds that it has not processed yet: the partition's " +
				"high-water mark (the log end, not the last stable offset: open transactions and commit markers count) " +
				"minus the next offset to process. Updated every second.",
			ConstLabels: labels}, []string{"topic", "partition"}),
		age: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "dedup", Name: "event_age_seconds",
			Help: "Age of a first-seen event when its processing ended: from the input record's timestamp (the producer's, " +
				"or the broker's with LogAppendTime) to the end of its handler and table write, before its transaction commits. " +
				"Includes the time in Kafka and the consumer lag, not only processing time.",
			ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		// The old name said "processing latency" for what is the event's
		// age; kept for one release so dashboards can move.
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "dedup", Name: "processing_latency_seconds",
			Help:        "Deprecated: use dedup_event_age_seconds, which observes the same values.",
			ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
	}
	reg.MustRegister(m.processed, m.skipped, m.expired, m.tooOld, m.handlerErrs, m.rekeyed, m.deadLetters, m.entries, m.lag, m.age, m.latency)
	// At 0 from the start for every reason: a series the first dead letter
	// created would start at 1, and increase() over it, which the alert and
	// the dashboard query, would stay 0.
	for _, reason := range dedup.DeadLetterReasons() {
		m.deadLetters.WithLabelValues(reason)
	}
	registerBuildInfo(reg, buildinfo.Read())
	return m
}

func (m *Metrics) OnProcessed(_ int32, latency time.Duration) {
	m.processed.Inc()
	if latency >= 0 {
		m.age.Observe(latency.Seconds())
		m.latency.Observe(latency.Seconds())
	}
}
func (m *Metrics) OnSkipped(int32)              { m.skipped.Inc() }
func (m *Metrics) OnExpired(int32)              { m.expired.Inc() }
func (m *Metrics) OnTooOld(int32)               { m.tooOld.Inc() }
func (m *Metrics) OnDeadLettered(reason string) { m.deadLetters.WithLabelValues(reason).Inc() }
func (m *Metrics) OnHandlerError()              { m.handlerErrs.Inc() }
func (m *Metrics) OnRekeyed()                   { m.rekeyed.Inc() }

// ForgetPartition drops the per-partition series of a partition this
// process no longer holds. Left at their last value, they would be summed
// with those of the instance that holds it now.
func (m *Metrics) ForgetPartition(partition int32) {
	label := strconv.Itoa(int(partition))
	m.entries.DeleteLabelValues(label)
	// Every topic's: the inputs and the loop topic are copartitioned.
	m.lag.DeletePartialMatch(prometheus.Labels{"partition": label})
}

// ConsumerLag sets the records of a held input or loop partition that are
// not processed yet.
func (m *Metrics) OnConsumerLag(topic string, partition int32, records int64) {
	m.lag.WithLabelValues(topic, strconv.Itoa(int(partition))).Set(float64(records))
}

// TableSize sets the number of seen records of a partition.
func (m *Metrics) OnTableSize(partition int32, n int64) {
	m.entries.WithLabelValues(strconv.Itoa(int(partition))).Set(float64(n))
}
