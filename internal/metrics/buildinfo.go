package metrics

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupkit/dedup/internal/buildinfo"
)

// registerBuildInfo exports dedup_build_info, 1 with the build as labels, so
// a dashboard can tell which instances run which code during an upgrade and
// join it onto the other series. It describes the process, not a group: the
// second group on the same registry finds it registered already.
func registerBuildInfo(reg prometheus.Registerer, info buildinfo.Info) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "dedup", Name: "build_info",
		Help:        "Always 1; the labels name the running build of dedup (processor version prints the same).",
		ConstLabels: prometheus.Labels{"version": info.Version, "commit": info.Commit(), "goversion": info.GoVersion}})
	g.Set(1)
	if err := reg.Register(g); err != nil {
		if are := (prometheus.AlreadyRegisteredError{}); !errors.As(err, &are) {
			panic(err)
		}
	}
}
