package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Runtime holds the exactly-once runtime's metrics; it implements
// processor.Hooks.
type Runtime struct {
	*Metrics
	committed       prometheus.Counter
	aborted         *prometheus.CounterVec
	commitSeconds   prometheus.Histogram
	txnRecords      prometheus.Counter
	fencings        prometheus.Counter
	deadFenced      prometheus.Counter
	stuckFenced     prometheus.Counter
	peers           prometheus.Gauge
	peerDeaths      prometheus.Counter
	peerFenced      prometheus.Counter
	stalls          prometheus.Counter
	rebalances      prometheus.Counter
	restored        prometheus.Counter
	tableOpens      *prometheus.CounterVec
	swept           prometheus.Counter
	restoreRemainig *prometheus.GaugeVec
	filterBytes     *prometheus.GaugeVec
	standbyLag      *prometheus.GaugeVec
	rebalanceTook   prometheus.Histogram
	callsInFlight   prometheus.Gauge
	callSeconds     prometheus.Histogram
	keyWaitSeconds  prometheus.Histogram
}

// NewRuntime registers the runtime metrics next to m's on reg.
func NewRuntime(reg prometheus.Registerer, m *Metrics, group string) *Runtime {
	labels := prometheus.Labels{"group": group}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "dedup", Name: name, Help: help, ConstLabels: labels})
	}
	r := &Runtime{
		Metrics:    m,
		committed:  counter("transactions_committed_total", "Kafka transactions committed."),
		txnRecords: counter("transaction_records_total", "Records produced in committed transactions (outputs, dead letters, changelog, loop)."),
		stalls: counter("commit_stalls_total", "Times a commit had run for another transaction timeout without ending "+
			"(the coordinator aborts such a transaction; usually a broker this instance cannot reach)."),
		fencings: counter("fencings_total", "Transactions that failed because this member or producer was fenced (zombie)."),
		deadFenced: counter("dead_transactions_fenced_total", "Transactions left open by a member that is no longer in the group "+
			"(killed, or timed out), aborted by this instance as the group's leader so their partitions' new owners need not wait "+
			"for the transaction timeout."),
		stuckFenced: counter("stuck_transactions_fenced_total", "Transactions of another instance of the group that stayed open "+
			"longer than --fence-stuck-after while they held this instance's partitions, aborted by this instance: "+
			"the instance that opened them was dead (kill -9) or stalled."),
		peers: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "dedup", Name: "peers_watched",
			Help: "Other instances of the group this one holds a liveness connection to (--peer-addr); fewer than the " +
				"group's other instances: their death is noticed only by --fence-stuck-after.", ConstLabels: labels}),
		peerDeaths: counter("peer_deaths_total", "Other instances of the group seen to die: their liveness connection ended "+
			"and their address refused a new one (kill -9, a crash, or a stop)."),
		peerFenced: counter("peer_transactions_fenced_total", "Open transactions of instances seen to die, aborted by this "+
			"instance at once so that the partitions they held go on."),
		rebalances: counter("rebalances_total", "Group sessions started (assignments)."),
		restored:   counter("restore_records_total", "Changelog records restored into local tables."),
		swept:      counter("cleanup_deleted_total", "Expired seen records deleted by the sweeper (tombstoned in the changelog)."),
		tableOpens: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "dedup", Name: "table_opens_total",
			Help: "Partition tables a session started with: kept (open from the member's previous session, only the " +
				"changelog's tail read) or opened (from the state dir, every stored key scanned).", ConstLabels: labels}, []string{"how"}),
		aborted: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "dedup", Name: "transactions_aborted_total",
			Help: "Kafka transactions aborted, by reason (fenced, error, interrupted).", ConstLabels: labels}, []string{"reason"}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "dedup", Name: "commit_duration_seconds",
			Help: "Time to commit one transaction, from sealing it to its overlays in LevelDB (processing goes on meanwhile).", ConstLabels: labels,
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		restoreRemainig: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "dedup", Name: "restore_remaining_records",
			Help: "Changelog records left to restore, by partition.", ConstLabels: labels}, []string{"partition"}),
		filterBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "dedup", Name: "table_filter_bytes",
			Help: "Memory of the in-memory filter of a partition's table keys, by partition.", ConstLabels: labels}, []string{"partition"}),
		standbyLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "dedup", Name: "standby_lag_records",
			Help: "Changelog records a standby replica of a partition this instance does not own was behind at its latest " +
				"catch-up (--standby-replicas), by partition; a takeover restores about that many.", ConstLabels: labels}, []string{"partition"}),
		rebalanceTook: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "dedup", Name: "rebalance_duration_seconds",
			Help: "From a member's stop (its first join, or the end of its previous session: revoked, aborted or failed) " +
				"until every partition it claimed is restored (partitions restored earlier process meanwhile).",
			ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(0.05, 2, 14)}),
		callsInFlight: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "dedup", Name: "handler_calls_in_flight",
			Help: "Handler calls running now (at most Concurrency per member).", ConstLabels: labels}),
		callSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "dedup", Name: "handler_call_seconds",
			Help:        "Time from a handler call's start until it returned, its retries and their backoff included.",
			ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}),
		keyWaitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "dedup", Name: "key_wait_seconds",
			Help: "Time a record waited for a running call of its key (dedup key, or record key under OrderByRecordKey) " +
				"to end; the records behind it waited with it.", ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}),
	}
	reg.MustRegister(r.swept, r.committed, r.stalls, r.txnRecords, r.fencings, r.deadFenced, r.stuckFenced, r.peers, r.peerDeaths, r.peerFenced, r.rebalances, r.restored, r.aborted, r.commitSeconds,
		r.restoreRemainig, r.filterBytes, r.standbyLag, r.rebalanceTook, r.tableOpens, r.callsInFlight, r.callSeconds, r.keyWaitSeconds)
	// At 0 from the start, so that the first abort is an increase() an
	// alert sees and a dashboard's query finds the series before any abort.
	for _, reason := range []string{"fenced", "error", "interrupted"} {
		r.aborted.WithLabelValues(reason)
	}
	for _, how := range []string{"kept", "opened"} {
		r.tableOpens.WithLabelValues(how)
	}
	return r
}

// CallStarted, CallEnded and KeyWaited make Runtime a processor.CallHooks.
func (r *Runtime) OnCallStarted() { r.callsInFlight.Inc() }
func (r *Runtime) OnCallEnded(took time.Duration) {
	r.callsInFlight.Dec()
	r.callSeconds.Observe(took.Seconds())
}
func (r *Runtime) OnKeyWaited(took time.Duration) { r.keyWaitSeconds.Observe(took.Seconds()) }

func (r *Runtime) OnTxnCommitted(took time.Duration, records int) {
	r.committed.Inc()
	r.txnRecords.Add(float64(records))
	r.commitSeconds.Observe(took.Seconds())
}
func (r *Runtime) OnSwept(_ int32, deleted int) { r.swept.Add(float64(deleted)) }
func (r *Runtime) OnTxnAborted(reason string)   { r.aborted.WithLabelValues(reason).Inc() }
func (r *Runtime) OnFenced()                    { r.fencings.Inc() }
func (r *Runtime) OnDeadTransactionFenced()     { r.deadFenced.Inc() }
func (r *Runtime) OnStuckTransactionFenced()    { r.stuckFenced.Inc() }
func (r *Runtime) OnCommitStalled()             { r.stalls.Inc() }
func (r *Runtime) OnPeersWatched(n int)         { r.peers.Set(float64(n)) }
func (r *Runtime) OnInstanceDied(fenced int) {
	r.peerDeaths.Inc()
	r.peerFenced.Add(float64(fenced))
}
func (r *Runtime) OnRebalanced() { r.rebalances.Inc() }
func (r *Runtime) OnRebalanceCompleted(took time.Duration) {
	r.rebalanceTook.Observe(took.Seconds())
}
func (r *Runtime) OnKeyFilterBytes(partition int32, bytes int) {
	r.filterBytes.WithLabelValues(strconv.Itoa(int(partition))).Set(float64(bytes))
}
func (r *Runtime) OnPartitionRevoked(partition int32) {
	r.ForgetPartition(partition)
	label := strconv.Itoa(int(partition))
	r.filterBytes.DeleteLabelValues(label)
	r.restoreRemainig.DeleteLabelValues(label)
}
func (r *Runtime) OnTableOpened(_ int32, kept bool) {
	how := "opened"
	if kept {
		how = "kept"
	}
	r.tableOpens.WithLabelValues(how).Inc()
}
func (r *Runtime) OnRestoreProgress(partition int32, restored, remaining int64) {
	r.restored.Add(float64(restored))
	r.restoreRemainig.WithLabelValues(strconv.Itoa(int(partition))).Set(float64(remaining))
}

func (r *Runtime) OnStandbyLag(partition int32, records int64) {
	label := strconv.Itoa(int(partition))
	if records < 0 {
		r.standbyLag.DeleteLabelValues(label)
		return
	}
	r.standbyLag.WithLabelValues(label).Set(float64(records))
}
