package deploy

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/dedupkit/dedup/internal/kafkautil"
	"github.com/dedupkit/dedup/internal/metrics"
	"github.com/dedupkit/dedup/processor"
)

// shutdownBound is the longest the worker needs after SIGTERM: a commit in
// flight ends within the transaction timeout (the coordinator aborts it
// then), and the event in hand waits at most its handler retries, which
// the worker keeps under half the transaction timeout.
const shutdownBound = processor.DefaultTransactionTimeout + processor.DefaultTransactionTimeout/2

// nonrootUID is the distroless image's nonroot user, who owns the image's
// state dir (Dockerfile).
const nonrootUID = 65532

func worker(t *testing.T, m manifests) *corev1.Container {
	t.Helper()
	cs := m.statefulSet.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("StatefulSet has %d containers, want the worker alone", len(cs))
	}
	return &cs[0]
}

// setting is where the worker's value of one variable comes from.
type setting struct {
	source string // "env", "ConfigMap", "Secret"
	value  string
	field  string // a downward API fieldPath
}

// workerSettings is every variable the manifests give the worker, from the
// container's env and the ConfigMap and Secret it takes with envFrom.
func workerSettings(t *testing.T, m manifests) map[string]setting {
	t.Helper()
	c := worker(t, m)
	got := map[string]setting{}
	add := func(name string, s setting) {
		if prev, ok := got[name]; ok {
			// env silently wins over envFrom: one value would be dead.
			t.Errorf("%s is set twice, in the %s and the %s", name, prev.source, s.source)
		}
		got[name] = s
	}
	for _, e := range c.Env {
		s := setting{source: "env", value: e.Value}
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			s.field = e.ValueFrom.FieldRef.FieldPath
		}
		add(e.Name, s)
	}
	var fromCM, fromSecret bool
	for _, ef := range c.EnvFrom {
		switch {
		case ef.Prefix != "":
			t.Errorf("envFrom with prefix %q: the keys must be the worker's variable names as they are", ef.Prefix)
		case ef.ConfigMapRef != nil && ef.ConfigMapRef.Name == m.configMap.Name:
			fromCM = true
		case ef.SecretRef != nil && ef.SecretRef.Name == m.secret.Name:
			fromSecret = true
		default:
			t.Errorf("envFrom %+v names no ConfigMap or Secret of deploy/k8s", ef)
		}
	}
	if !fromCM || !fromSecret {
		t.Errorf("the worker takes ConfigMap %s: %v, Secret %s: %v; want both through envFrom",
			m.configMap.Name, fromCM, m.secret.Name, fromSecret)
	}
	for k, v := range m.configMap.Data {
		add(k, setting{source: "ConfigMap", value: v})
	}
	for k, v := range m.secret.StringData {
		add(k, setting{source: "Secret", value: v})
	}
	for k, v := range m.secret.Data {
		add(k, setting{source: "Secret", value: string(v)})
	}
	return got
}

// value is the worker's value of a variable: the manifests', else the
// flag's default.
func value(vars map[string]string, settings map[string]setting, name string) string {
	if s, ok := settings[name]; ok {
		return s.value
	}
	return vars[name]
}

func TestKustomizationListsEveryManifest(t *testing.T) {
	m := loadManifests(t)
	var want []string
	for _, f := range m.files {
		if f != podMonitorFile {
			want = append(want, f)
		}
	}
	slices.Sort(want)
	got := slices.Sorted(slices.Values(m.kust.Resources))
	if !slices.Equal(got, want) {
		t.Errorf("kustomization.yaml resources %v, want every manifest but %s: %v", got, podMonitorFile, want)
	}
	if m.kust.Kind != "Kustomization" || m.kust.Namespace != m.namespace.Name {
		t.Errorf("kustomization.yaml: kind %q namespace %q, want Kustomization into namespace %q",
			m.kust.Kind, m.kust.Namespace, m.namespace.Name)
	}
	if ns := m.podMonitor.GetNamespace(); ns != m.kust.Namespace {
		t.Errorf("%s: namespace %q, want the kustomization's %q (it is applied by itself)", podMonitorFile, ns, m.kust.Namespace)
	}
	image, _, _ := strings.Cut(worker(t, m).Image, ":")
	if !slices.ContainsFunc(m.kust.Images, func(i kustomizeImage) bool { return i.Name == image }) {
		t.Errorf("kustomization.yaml's images do not name the worker's image %q", image)
	}
}

func TestStatefulSetSetsOnlyWorkerVariables(t *testing.T) {
	m := loadManifests(t)
	vars := workerVars(t)
	settings := workerSettings(t, m)
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		if _, ok := vars[name]; !ok {
			t.Errorf("%s (in the %s) is not a variable of processor run (docs/configuration.md)", name, settings[name].source)
		}
	}
	tests := []struct {
		name, source, field string
	}{
		// The pod's name: stable across restarts and distinct per pod.
		{"PROCESSOR_INSTANCE_ID", "env", "metadata.name"},
		{"PROCESSOR_SASL_PASSWORD", "Secret", ""},
		{"PROCESSOR_BROKERS", "ConfigMap", ""},
		{"PROCESSOR_GROUP", "ConfigMap", ""},
		{"PROCESSOR_INPUT", "ConfigMap", ""},
		{"PROCESSOR_OUTPUT", "ConfigMap", ""},
	}
	for _, tt := range tests {
		s, ok := settings[tt.name]
		if !ok || s.source != tt.source || s.field != tt.field {
			t.Errorf("%s: %+v (set: %v), want it from the %s (field %q)", tt.name, s, ok, tt.source, tt.field)
		}
	}
	if v := worker(t, m).Args; !slices.Equal(v, []string{"run"}) {
		t.Errorf("container args %q, want [run]", v)
	}
}

// answer is the status the worker's HTTP handler gives path for health h.
func answer(path string, h metrics.Health) int {
	rec := httptest.NewRecorder()
	metrics.Handler(prometheus.NewRegistry(), func() metrics.Health { return h }).
		ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code
}

// containerPort resolves a probe's or a Service's port to the container's.
func containerPort(t *testing.T, c *corev1.Container, p intstr.IntOrString) int32 {
	t.Helper()
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp.ContainerPort
		}
	}
	t.Fatalf("port %s is none of the container's %+v", p.String(), c.Ports)
	return 0
}

func TestStatefulSetWiring(t *testing.T) {
	m := loadManifests(t)
	vars := workerVars(t)
	settings := workerSettings(t, m)
	ss := m.statefulSet
	pod := ss.Spec.Template
	c := worker(t, m)
	podLabels := labels.Set(pod.Labels)
	httpPort, _ := strconv.Atoi(listenPort(t, value(vars, settings, "PROCESSOR_HTTP_ADDR")))

	t.Run("selectors match the pod's labels", func(t *testing.T) {
		selects := func(what string, sel *metav1.LabelSelector) {
			s, err := metav1.LabelSelectorAsSelector(sel)
			if err != nil || s.Empty() || !s.Matches(podLabels) {
				t.Errorf("%s's selector %v (%v) does not select the pods (labels %v)", what, sel, err, pod.Labels)
			}
		}
		selects("StatefulSet", ss.Spec.Selector)
		selects("PodDisruptionBudget", m.pdb.Spec.Selector)
		pmLabels, _, _ := unstructured.NestedStringMap(m.podMonitor.Object, "spec", "selector", "matchLabels")
		selects("PodMonitor", &metav1.LabelSelector{MatchLabels: pmLabels})
		for _, svc := range m.services {
			if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
				t.Errorf("Service %s's selector %v does not select the pods", svc.Name, svc.Spec.Selector)
			}
		}
	})

	t.Run("the headless Service is the serviceName", func(t *testing.T) {
		i := slices.IndexFunc(m.services, func(s *corev1.Service) bool { return s.Name == ss.Spec.ServiceName })
		if i < 0 || m.services[i].Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("serviceName %q is no headless Service (clusterIP: None) of deploy/k8s", ss.Spec.ServiceName)
		}
	})

	t.Run("ports are --http-addr's", func(t *testing.T) {
		if got := containerPort(t, c, intstr.FromString("http")); int(got) != httpPort {
			t.Errorf("container port http %d, --http-addr's %d", got, httpPort)
		}
		for _, svc := range m.services {
			for _, p := range svc.Spec.Ports {
				if got := containerPort(t, c, p.TargetPort); int(got) != httpPort {
					t.Errorf("Service %s port %s reaches %d, --http-addr's is %d", svc.Name, p.Name, got, httpPort)
				}
			}
			if a, ok := svc.Annotations["prometheus.io/port"]; ok && a != strconv.Itoa(httpPort) {
				t.Errorf("Service %s: prometheus.io/port %s, --http-addr's is %d", svc.Name, a, httpPort)
			}
		}
		eps, _, _ := unstructured.NestedSlice(m.podMonitor.Object, "spec", "podMetricsEndpoints")
		if len(eps) == 0 {
			t.Fatalf("%s has no podMetricsEndpoints", podMonitorFile)
		}
		for _, ep := range eps {
			port, _, _ := unstructured.NestedString(ep.(map[string]any), "port")
			path, _, _ := unstructured.NestedString(ep.(map[string]any), "path")
			if got := containerPort(t, c, intstr.FromString(port)); int(got) != httpPort || answer(path, metrics.Health{}) != http.StatusOK {
				t.Errorf("PodMonitor endpoint %s%s: port %d, --http-addr's %d; or no metrics there", port, path, got, httpPort)
			}
		}
	})

	t.Run("probes ask the worker's endpoints", func(t *testing.T) {
		notReady := metrics.Health{Live: true}
		dead := metrics.Health{}
		tests := []struct {
			name              string
			probe             *corev1.Probe
			notReady, notLive int // the answers a probe must see
		}{
			{"readiness", c.ReadinessProbe, http.StatusServiceUnavailable, http.StatusServiceUnavailable},
			{"liveness", c.LivenessProbe, http.StatusOK, http.StatusServiceUnavailable},
			{"startup", c.StartupProbe, http.StatusOK, http.StatusServiceUnavailable},
		}
		for _, tt := range tests {
			if tt.probe == nil || tt.probe.HTTPGet == nil {
				t.Errorf("%s probe: none, or not an HTTP GET", tt.name)
				continue
			}
			get := tt.probe.HTTPGet
			if got := containerPort(t, c, get.Port); int(got) != httpPort {
				t.Errorf("%s probe asks port %d, --http-addr's is %d", tt.name, got, httpPort)
			}
			if a, b := answer(get.Path, notReady), answer(get.Path, dead); a != tt.notReady || b != tt.notLive {
				t.Errorf("%s probe on %s: a worker restoring its tables answers %d, a stalled one %d; want %d and %d",
					tt.name, get.Path, a, b, tt.notReady, tt.notLive)
			}
		}
		if sp := c.StartupProbe; sp != nil {
			budget := time.Duration(sp.PeriodSeconds*sp.FailureThreshold) * time.Second
			if budget <= kafkautil.StartupTimeout {
				t.Errorf("startup probe allows %v, the worker tries to reach the brokers for %v before it serves HTTP",
					budget, kafkautil.StartupTimeout)
			}
		}
	})

	t.Run("the state volume is --state-dir", func(t *testing.T) {
		dir := value(vars, settings, "PROCESSOR_STATE_DIR")
		var claims []string
		for _, vct := range ss.Spec.VolumeClaimTemplates {
			claims = append(claims, vct.Name)
			if _, ok := vct.Spec.Resources.Requests[corev1.ResourceStorage]; !ok {
				t.Errorf("volume claim %s requests no storage", vct.Name)
			}
		}
		i := slices.IndexFunc(c.VolumeMounts, func(v corev1.VolumeMount) bool { return v.MountPath == dir })
		if i < 0 || !slices.Contains(claims, c.VolumeMounts[i].Name) || c.VolumeMounts[i].ReadOnly {
			t.Errorf("--state-dir %q is no writable mount of a volume claim template %v: mounts %+v", dir, claims, c.VolumeMounts)
		}
	})

	t.Run("the grace period outlasts a shutdown", func(t *testing.T) {
		grace := 30 * time.Second // the API's default
		if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
			grace = time.Duration(*g) * time.Second
		}
		if grace <= shutdownBound {
			t.Errorf("terminationGracePeriodSeconds %v, want more than %v", grace, shutdownBound)
		}
	})

	t.Run("a memory limit for --memory-limit-ratio", func(t *testing.T) {
		limit, req := c.Resources.Limits.Memory(), c.Resources.Requests.Memory()
		if limit.IsZero() || req.Cmp(*limit) > 0 {
			t.Errorf("memory limit %v, request %v: want a limit, the request at most the limit", limit, req)
		}
		if value(vars, settings, "PROCESSOR_MEMORY_LIMIT_RATIO") == "0" {
			t.Error("--memory-limit-ratio 0 ignores the limit")
		}
	})

	t.Run("non-root, read-only root file system", func(t *testing.T) {
		psc, csc := pod.Spec.SecurityContext, c.SecurityContext
		if psc == nil || csc == nil {
			t.Fatal("no pod or container securityContext")
		}
		if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != nonrootUID ||
			psc.FSGroup == nil || *psc.FSGroup != nonrootUID {
			t.Errorf("pod securityContext %+v: want runAsNonRoot, runAsUser and fsGroup %d", psc, nonrootUID)
		}
		if csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem ||
			csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation ||
			csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") {
			t.Errorf("container securityContext %+v: want a read-only root, no privilege escalation, all capabilities dropped", csc)
		}
		dockerfile, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(dockerfile), ":nonroot") || !strings.Contains(string(dockerfile), "--chown=65532:65532") {
			t.Error("the Dockerfile no longer runs as the distroless nonroot user 65532")
		}
	})

	t.Run("the disruption budget takes one pod at a time", func(t *testing.T) {
		if mu := m.pdb.Spec.MaxUnavailable; mu == nil || *mu != intstr.FromInt32(1) {
			t.Errorf("maxUnavailable %v, want 1", mu)
		}
	})
}
