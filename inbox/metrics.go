package inbox

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the inbox's Prometheus series; without a Registerer they
// count into nothing.
type metrics struct {
	first, held, conflicts, swept prometheus.Counter
	rows                          prometheus.Gauge
	commit                        prometheus.Observer
}

func newMetrics(reg prometheus.Registerer, group string) (*metrics, error) {
	labels := prometheus.Labels{"group": group}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
	}
	m := &metrics{
		first:     counter("dedup_inbox_first_processed_total", "Events whose database work ran: first claims (an attempt whose transaction then rolled back counts too)."),
		held:      counter("dedup_inbox_held_total", "Events answered from the inbox: an earlier attempt committed their database work, but not their Kafka transaction."),
		conflicts: counter("dedup_inbox_conflicts_total", "Events another transaction committed while this one claimed them (two attempts raced)."),
		swept:     counter("dedup_inbox_swept_total", "Expired inbox rows deleted."),
		rows: prometheus.NewGauge(prometheus.GaugeOpts{Name: "dedup_inbox_rows", ConstLabels: labels,
			Help: "Inbox rows of the group, counted by the sweeper."}),
	}
	commit := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "dedup_inbox_commit_seconds", ConstLabels: labels,
		Help:    "Duration of the database commit before each Kafka commit, the messages' update included.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})
	m.commit = commit
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.first, m.held, m.conflicts, m.swept, m.rows, commit} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, errors.New("inbox: its metrics are registered already: one Inbox per group and registry")
			}
			return nil, err
		}
	}
	return m, nil
}
