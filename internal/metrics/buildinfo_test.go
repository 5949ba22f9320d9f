package metrics

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dedupkit/dedup/internal/buildinfo"
)

// dedup_build_info comes with the group's metrics, once however many groups
// share the registry (two would panic in MustRegister otherwise).
func TestBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	New(reg, "g1")
	New(reg, "g2")
	info := buildinfo.Read()
	want := fmt.Sprintf(`dedup_build_info{commit=%q,goversion=%q,version=%q} 1`, info.Commit(), info.GoVersion, info.Version)
	body := scrape(t, reg)
	if n := strings.Count(body, want); n != 1 {
		t.Errorf("/metrics has %q %d times, want once:\n%s", want, n, body)
	}
}

func TestBuildInfoLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	registerBuildInfo(reg, buildinfo.Info{Version: "v1.2.0-3-gff8ccfa-dirty", Revision: "ff8ccfa0e1f2", Modified: true, GoVersion: "go1.26.8"})
	want := `dedup_build_info{commit="ff8ccfa0e1f2-dirty",goversion="go1.26.8",version="v1.2.0-3-gff8ccfa-dirty"} 1`
	if body := scrape(t, reg); !strings.Contains(body, want) {
		t.Errorf("/metrics lacks %q:\n%s", want, body)
	}
}
