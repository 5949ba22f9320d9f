package deploy

import (
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/compose-spec/compose-go/v2/types"
)

// peerSecretName is the Secret the StatefulSet mounts as --peer-secret-file.
const peerSecretName = "dedup-worker-peer"

// minPeerSecret is processor.MinPeerSecret: the worker refuses a shorter one.
const minPeerSecret = 32

// The liveness listener opens only with a secret: the StatefulSet mounts
// the Secret as the file --peer-secret-file names, read-only and not
// readable by others, never through a variable; its placeholder is too
// short for the worker to start with; the port is --peer-addr's.
func TestStatefulSetPeerSecret(t *testing.T) {
	m := loadManifests(t)
	vars := workerSettingsOrDefaults(t, m)
	c := worker(t, m)
	file := vars["PROCESSOR_PEER_SECRET_FILE"]
	if file == "" {
		t.Fatal("PROCESSOR_PEER_SECRET_FILE is not set: the liveness listener stays closed")
	}
	keys := slices.Collect(maps.Keys(m.peerSecret.StringData))
	if len(keys) != 1 || len(m.peerSecret.Data) != 0 {
		t.Fatalf("Secret %s: keys %v (data %d), want one key in stringData", peerSecretName, keys, len(m.peerSecret.Data))
	}
	if p := m.peerSecret.StringData[keys[0]]; len(strings.TrimSpace(p)) >= minPeerSecret {
		t.Errorf("Secret %s's placeholder is %d bytes: one under %d makes the worker refuse it, so nobody runs with the published one",
			peerSecretName, len(p), minPeerSecret)
	}
	pod := m.statefulSet.Spec.Template.Spec
	i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == peerSecretName })
	if i < 0 {
		t.Fatalf("no volume of Secret %s in the pod", peerSecretName)
	}
	vol := pod.Volumes[i]
	if mode := vol.Secret.DefaultMode; mode == nil || *mode&0o007 != 0 {
		t.Errorf("volume %s: defaultMode %v, want none for others (0440: the fsGroup reads it)", vol.Name, mode)
	}
	j := slices.IndexFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.Name == vol.Name })
	if j < 0 || !c.VolumeMounts[j].ReadOnly || path.Join(c.VolumeMounts[j].MountPath, keys[0]) != file {
		t.Errorf("Secret %s is not mounted read-only as %s (mounts %+v)", peerSecretName, file, c.VolumeMounts)
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == peerSecretName {
			t.Errorf("%s takes the peer secret through a variable; mount it as a file", e.Name)
		}
	}
	if got, want := containerPort(t, c, intstr.FromString("peers")), listenPort(t, vars["PROCESSOR_PEER_ADDR"]); want == "0" || strconv.Itoa(int(got)) != want {
		t.Errorf("container port peers %d, --peer-addr's %s (a fixed port, the same on every pod)", got, want)
	}
}

// workerSettingsOrDefaults is every variable's value as the worker sees
// it: the manifests', else the flag's default.
func workerSettingsOrDefaults(t *testing.T, m manifests) map[string]string {
	t.Helper()
	vars := workerVars(t)
	settings := workerSettings(t, m)
	out := map[string]string{}
	for name := range vars {
		out[name] = value(vars, settings, name)
	}
	return out
}

// The compose stack's workers read one secret from a volume that a one-shot
// fills before they start, and that only they mount besides it.
func TestComposePeerSecret(t *testing.T) {
	p := loadCompose(t)
	ws := workers(p)
	if len(ws) < 2 {
		t.Fatalf("%d workers, want two", len(ws))
	}
	var volume string
	for _, w := range ws {
		file := env(w, "PROCESSOR_PEER_SECRET_FILE")
		if file == "" {
			t.Errorf("%s: no PROCESSOR_PEER_SECRET_FILE: its liveness listener stays closed", w.Name)
			continue
		}
		i := slices.IndexFunc(w.Volumes, func(v types.ServiceVolumeConfig) bool { return strings.HasPrefix(file, v.Target+"/") })
		if i < 0 || !w.Volumes[i].ReadOnly {
			t.Errorf("%s: %s is on no read-only volume (%+v)", w.Name, file, w.Volumes)
			continue
		}
		if volume != "" && w.Volumes[i].Source != volume {
			t.Errorf("%s reads its secret from volume %s, another worker from %s", w.Name, w.Volumes[i].Source, volume)
		}
		volume = w.Volumes[i].Source
		dep, ok := w.DependsOn["peer-secret"]
		if !ok || dep.Condition != "service_completed_successfully" {
			t.Errorf("%s does not wait for the one-shot peer-secret to complete: %+v", w.Name, w.DependsOn)
		}
	}
	gen, ok := p.Services["peer-secret"]
	if !ok || !oneShot(gen) {
		t.Fatal("no one-shot service peer-secret")
	}
	if !slices.ContainsFunc(gen.Volumes, func(v types.ServiceVolumeConfig) bool { return v.Source == volume && !v.ReadOnly }) {
		t.Errorf("peer-secret does not write volume %s: %+v", volume, gen.Volumes)
	}
	for name, s := range p.Services {
		if name == "peer-secret" || s.Build != nil {
			continue
		}
		if slices.ContainsFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool { return v.Source == volume }) {
			t.Errorf("%s mounts the peer secret's volume", name)
		}
	}
}
