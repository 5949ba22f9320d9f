package metrics

import (
	"errors"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// SetRetention exports the retention check the worker makes at start
// (processor.CheckRetention): dedup_retention_seconds, how long a seen
// record is kept, and dedup_input_retention_seconds{topic}, the input
// topic's retention.ms (+Inf when -1). An alert compares the two: a replay
// of events older than the table's retention processes them again. Both
// are read once, at start; a later change of retention.ms shows at the next
// start. Calling it again on the same registry (another input topic, or a
// second check) sets the same series.
func SetRetention(reg prometheus.Registerer, group, topic string, retention, topicRetention time.Duration, infinite bool) {
	labels := prometheus.Labels{"group": group}
	table := registered(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "dedup", Name: "retention_seconds",
		Help:        "How long a seen record is kept (--retention): a duplicate arriving later is processed again.",
		ConstLabels: labels}, nil))
	input := registered(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "dedup", Name: "input_retention_seconds",
		Help:        "retention.ms of the input topic as read at start, in seconds; +Inf for -1 (kept forever).",
		ConstLabels: labels}, []string{"topic"}))
	table.WithLabelValues().Set(retention.Seconds())
	v := topicRetention.Seconds()
	if infinite {
		v = math.Inf(1)
	}
	input.WithLabelValues(topic).Set(v)
}

// registered registers c on reg, or returns the equal collector registered
// before.
func registered(reg prometheus.Registerer, c *prometheus.GaugeVec) *prometheus.GaugeVec {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			panic(err)
		}
		return are.ExistingCollector.(*prometheus.GaugeVec)
	}
	return c
}
