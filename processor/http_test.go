package processor

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/buildinfo"
)

// The worker's /metrics names the build it runs next to the group's
// metrics: what a dashboard needs to tell instances apart during an upgrade.
// On an in-process broker, so it runs without Kafka.
func TestMetricsEndpointNamesTheBuild(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topo := &dedup.Topology{Group: "buildinfo", Inputs: []string{"orders"}, Outputs: []string{"orders-deduped"}, DLQ: "buildinfo-dlq",
		KeyType: dedup.KeyEventID, Retention: dedup.DefaultRetention,
		EventID: dedup.JSONField("eventId"), Handler: dedup.Forward()}
	reg := prometheus.NewRegistry()
	p, err := New(ctx, Config{Brokers: cluster.ListenAddrs(), StateDir: t.TempDir(), Replication: 1, Registerer: reg,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, topo)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	srv := httptest.NewServer(p.HTTPHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	info := buildinfo.Read()
	for _, want := range []string{
		fmt.Sprintf(`dedup_build_info{commit=%q,goversion=%q,version=%q} 1`, info.Commit(), info.GoVersion, info.Version),
		`dedup_events_processed_total{group="buildinfo"} 0`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, b)
		}
	}
}
