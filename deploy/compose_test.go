package deploy

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/dedupkit/dedup/internal/metrics"
)

var composeFile = filepath.Join(repoRoot, "docker-compose.yml")

// loadCompose loads docker-compose.yml as `docker compose` does: validated
// against the Compose specification's schema, anchors and merges resolved,
// relative paths made absolute. No variable of the machine running the test
// reaches it.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  root,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(root, "docker-compose.yml"), Content: data}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) { o.SetProjectName("dedup", true) })
	if err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return p
}

// oneShot is a service that runs to its end: it needs no health check.
func oneShot(s types.ServiceConfig) bool { return s.Restart == types.RestartPolicyNo }

// workers are the services that run the worker: the image built here.
func workers(p *types.Project) []types.ServiceConfig {
	var ws []types.ServiceConfig
	for _, name := range slices.Sorted(slices.Values(p.ServiceNames())) {
		if s := p.Services[name]; s.Build != nil {
			ws = append(ws, s)
		}
	}
	return ws
}

func env(s types.ServiceConfig, name string) string {
	if v, ok := s.Environment[name]; ok && v != nil {
		return *v
	}
	return ""
}

func TestComposeHealthChecks(t *testing.T) {
	p := loadCompose(t)
	for name, s := range p.Services {
		hc := s.HealthCheck
		healthy := hc != nil && !hc.Disable && len(hc.Test) > 1
		if !oneShot(s) && !healthy {
			t.Errorf("%s runs on (restart %q) without a healthcheck", name, s.Restart)
		}
		if oneShot(s) && healthy {
			t.Errorf("%s is a one-shot (restart: \"no\") with a healthcheck", name)
		}
		for dep, d := range s.DependsOn {
			target, ok := p.Services[dep]
			switch {
			case !ok:
				t.Errorf("%s depends on %s, which is no service", name, dep)
			case d.Condition == types.ServiceConditionHealthy && (target.HealthCheck == nil || target.HealthCheck.Disable):
				t.Errorf("%s waits for %s to be healthy, which has no healthcheck", name, dep)
			case d.Condition == types.ServiceConditionCompletedSuccessfully && !oneShot(target):
				t.Errorf("%s waits for %s to complete, which is no one-shot", name, dep)
			}
		}
	}
}

func TestComposeWorkers(t *testing.T) {
	p := loadCompose(t)
	vars := workerVars(t)
	dockerfile, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range p.Services {
		for k := range s.Environment {
			if _, ok := vars[k]; strings.HasPrefix(k, "PROCESSOR_") && !ok {
				t.Errorf("%s: %s is not a variable of processor run (docs/configuration.md)", name, k)
			}
		}
	}
	ws := workers(p)
	if len(ws) != 2 {
		t.Fatalf("%d worker services, want two", len(ws))
	}
	ids, volumes := map[string]bool{}, map[string]bool{}
	for _, w := range ws {
		id := env(w, "PROCESSOR_INSTANCE_ID")
		if id == "" || ids[id] {
			t.Errorf("%s: instance ID %q, want one of its own", w.Name, id)
		}
		ids[id] = true
		if env(w, "PROCESSOR_GROUP") != env(ws[0], "PROCESSOR_GROUP") {
			t.Errorf("%s: group %q, %s's is %q: want one group", w.Name, env(w, "PROCESSOR_GROUP"), ws[0].Name, env(ws[0], "PROCESSOR_GROUP"))
		}
		// The image makes its VOLUME owned by the nonroot user, so a fresh
		// named volume there is writable; anywhere else it would be root's.
		dir := env(w, "PROCESSOR_STATE_DIR")
		if !strings.Contains(string(dockerfile), "VOLUME "+dir+"\n") {
			t.Errorf("%s: --state-dir %q is not the Dockerfile's VOLUME", w.Name, dir)
		}
		i := slices.IndexFunc(w.Volumes, func(v types.ServiceVolumeConfig) bool { return v.Target == dir })
		switch {
		case i < 0 || w.Volumes[i].Type != types.VolumeTypeVolume:
			t.Errorf("%s: no named volume at --state-dir %q: %+v", w.Name, dir, w.Volumes)
		case volumes[w.Volumes[i].Source]:
			t.Errorf("%s: volume %s is another worker's too", w.Name, w.Volumes[i].Source)
		default:
			volumes[w.Volumes[i].Source] = true
		}
		host, _, err := net.SplitHostPort(strings.Split(env(w, "PROCESSOR_BROKERS"), ",")[0])
		if _, ok := p.Services[host]; err != nil || !ok {
			t.Errorf("%s: brokers %q name no service of the stack", w.Name, env(w, "PROCESSOR_BROKERS"))
		}
		port := listenPort(t, env(w, "PROCESSOR_HTTP_ADDR"))
		if !slices.ContainsFunc(w.Ports, func(pc types.ServicePortConfig) bool { return pc.Target == uint32(atoi(t, port)) }) {
			t.Errorf("%s: publishes %+v, not --http-addr's port %s", w.Name, w.Ports, port)
		}
		if g := w.StopGracePeriod; g == nil || time.Duration(*g) <= shutdownBound {
			t.Errorf("%s: stop_grace_period %v, want more than the %v a shutdown may take", w.Name, g, shutdownBound)
		}
		if hc := w.HealthCheck; hc == nil || !slices.Equal(hc.Test[:3], []string{"CMD", "/processor", "probe"}) {
			t.Errorf("%s: healthcheck %v, want the image's /processor probe", w.Name, hc)
		}
	}
	if !strings.Contains(string(dockerfile), "/out/processor /processor\n") {
		t.Error("the Dockerfile no longer installs the worker as /processor, which the healthchecks run")
	}
}

// TestComposeMounts checks that every file or directory mounted from the
// repository exists: Docker would mount an empty directory in its place.
func TestComposeMounts(t *testing.T) {
	p := loadCompose(t)
	root, _ := filepath.Abs(repoRoot)
	for name, s := range p.Services {
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			if !strings.HasPrefix(v.Source, root+string(filepath.Separator)) {
				t.Errorf("%s mounts %s, outside the repository", name, v.Source)
			}
			if _, err := os.Stat(v.Source); err != nil {
				t.Errorf("%s mounts %s: %v", name, v.Source, err)
			}
			if !v.ReadOnly {
				t.Errorf("%s mounts %s writable; the stack only reads the repository", name, v.Source)
			}
		}
	}
}

// prometheusConfig is the part of Prometheus' configuration the stack
// uses; decoded strictly, so a field this test does not know fails it.
type prometheusConfig struct {
	Global struct {
		ScrapeInterval     string `json:"scrape_interval"`
		EvaluationInterval string `json:"evaluation_interval"`
	} `json:"global"`
	RuleFiles     []string `json:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `json:"job_name"`
		MetricsPath   string `json:"metrics_path"`
		StaticConfigs []struct {
			Targets []string `json:"targets"`
		} `json:"static_configs"`
	} `json:"scrape_configs"`
}

// mountedFile is the host file a service mounts at target.
func mountedFile(t *testing.T, s types.ServiceConfig, target string) string {
	t.Helper()
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeBind && v.Target == target {
			return v.Source
		}
	}
	t.Fatalf("%s mounts nothing at %s", s.Name, target)
	return ""
}

func TestComposePrometheusScrapesTheWorkers(t *testing.T) {
	p := loadCompose(t)
	prom, err := p.GetService("prometheus")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(mountedFile(t, prom, "/etc/prometheus/prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg prometheusConfig
	if err := decodeStrict(data, &cfg); err != nil {
		t.Fatalf("prometheus.yml: %v", err)
	}
	var want, got []string
	for _, w := range workers(p) {
		want = append(want, net.JoinHostPort(w.Name, listenPort(t, env(w, "PROCESSOR_HTTP_ADDR"))))
	}
	for _, sc := range cfg.ScrapeConfigs {
		path := sc.MetricsPath
		if path == "" {
			path = "/metrics"
		}
		if code := answer(path, metrics.Health{}); code != http.StatusOK {
			t.Errorf("job %s scrapes %s, where the worker answers %d", sc.JobName, path, code)
		}
		for _, st := range sc.StaticConfigs {
			got = append(got, st.Targets...)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("Prometheus scrapes %v, want every worker at its --http-addr port: %v", got, want)
	}
	// Every rule file pattern must match a file or directory the service
	// mounts, and the project's alert rules must be among them.
	loaded := map[string]bool{}
	for _, rf := range cfg.RuleFiles {
		dir := filepath.Dir(rf)
		matched := false
		for _, v := range prom.Volumes {
			if ok, _ := filepath.Match(rf, v.Target); ok || v.Target == dir {
				matched = true
				loaded[v.Source] = true
			}
		}
		if !matched {
			t.Errorf("rule_files %s: nothing is mounted there", rf)
		}
	}
	rules, err := filepath.Abs("prometheus/rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	if !loaded[rules] {
		t.Errorf("Prometheus does not load %s (loads %v)", rules, loaded)
	}
}

func TestComposeGrafanaReadsPrometheus(t *testing.T) {
	p := loadCompose(t)
	g, err := p.GetService("grafana")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(mountedFile(t, g, "/etc/grafana/provisioning/datasources/dedup.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var ds struct {
		APIVersion  int `json:"apiVersion"`
		Datasources []struct {
			Name      string         `json:"name"`
			UID       string         `json:"uid"`
			Type      string         `json:"type"`
			Access    string         `json:"access"`
			URL       string         `json:"url"`
			IsDefault bool           `json:"isDefault"`
			JSONData  map[string]any `json:"jsonData"`
		} `json:"datasources"`
	}
	if err := decodeStrict(data, &ds); err != nil {
		t.Fatalf("datasources: %v", err)
	}
	if len(ds.Datasources) != 1 {
		t.Fatalf("%d datasources, want the stack's Prometheus", len(ds.Datasources))
	}
	u, err := url.Parse(ds.Datasources[0].URL)
	if err != nil || ds.Datasources[0].Type != "prometheus" || u.Hostname() != "prometheus" || u.Port() != "9090" {
		t.Errorf("datasource %+v: want type prometheus at the prometheus service's port 9090", ds.Datasources[0])
	}
	if _, err := p.GetService(u.Hostname()); err != nil {
		t.Errorf("datasource URL %s: %v", ds.Datasources[0].URL, err)
	}
}
