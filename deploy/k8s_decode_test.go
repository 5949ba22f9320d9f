package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

var k8sDir = filepath.Join(repoRoot, "deploy", "k8s")

// podMonitorFile is applied by itself where the Prometheus operator's CRD
// is installed, so kustomization.yaml does not list it.
const podMonitorFile = "podmonitor.yaml"

// kustomization is the part of kustomize's Kustomization these manifests
// use; decoded strictly, a field it does not know fails the test.
type kustomization struct {
	APIVersion string           `json:"apiVersion"`
	Kind       string           `json:"kind"`
	Namespace  string           `json:"namespace"`
	Resources  []string         `json:"resources"`
	Images     []kustomizeImage `json:"images"`
}

type kustomizeImage struct {
	Name    string `json:"name"`
	NewName string `json:"newName"`
	NewTag  string `json:"newTag"`
}

// manifests is deploy/k8s decoded: every built-in object strictly with
// k8s.io/api's types, the PodMonitor (a CRD) as unstructured.
type manifests struct {
	kust        kustomization
	namespace   *corev1.Namespace
	configMap   *corev1.ConfigMap
	secret      *corev1.Secret // the SASL password's, taken with envFrom
	peerSecret  *corev1.Secret // peerSecretName, mounted as a file
	statefulSet *appsv1.StatefulSet
	pdb         *policyv1.PodDisruptionBudget
	services    []*corev1.Service
	podMonitor  *unstructured.Unstructured
	// files maps each object's kind/name to the file it came from.
	files map[string]string
}

func k8sScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// yamlDocuments splits a file into its YAML documents, skipping empty ones.
func yamlDocuments(t *testing.T, data []byte) [][]byte {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			docs = append(docs, doc)
		}
	}
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.Bytes()
}

// decodeStrict decodes YAML into v as JSON, refusing unknown fields.
func decodeStrict(data []byte, v any) error {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// loadManifests decodes every YAML file in deploy/k8s. The strict
// serializer refuses unknown and duplicate fields, so a misspelt or
// misplaced field (a probe under the pod instead of the container) fails
// here rather than being dropped silently by the API server.
func loadManifests(t *testing.T) manifests {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no manifests in %s (%v)", k8sDir, err)
	}
	strict := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, k8sScheme(t), k8sScheme(t),
		kjson.SerializerOptions{Yaml: true, Strict: true})
	m := manifests{files: map[string]string{}}
	for _, path := range paths {
		file := filepath.Base(path)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		docs := yamlDocuments(t, data)
		if len(docs) != 1 {
			t.Fatalf("%s: %d YAML documents, want one object per file", file, len(docs))
		}
		switch file {
		case "kustomization.yaml":
			if err := decodeStrict(docs[0], &m.kust); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			continue
		case podMonitorFile:
			obj := map[string]any{}
			if err := yaml.Unmarshal(docs[0], &obj); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			m.podMonitor = &unstructured.Unstructured{Object: obj}
			m.files["PodMonitor/"+m.podMonitor.GetName()] = file
			continue
		}
		obj, gvk, err := strict.Decode(docs[0], nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		var name string
		switch o := obj.(type) {
		case *corev1.Namespace:
			m.namespace, name = o, o.Name
		case *corev1.ConfigMap:
			m.configMap, name = o, o.Name
		case *corev1.Secret:
			if o.Name == peerSecretName {
				m.peerSecret, name = o, o.Name
			} else {
				m.secret, name = o, o.Name
			}
		case *appsv1.StatefulSet:
			m.statefulSet, name = o, o.Name
		case *policyv1.PodDisruptionBudget:
			m.pdb, name = o, o.Name
		case *corev1.Service:
			m.services, name = append(m.services, o), o.Name
		default:
			t.Fatalf("%s: unexpected kind %s", file, gvk)
		}
		if obj.(interface{ GetNamespace() string }).GetNamespace() != "" {
			t.Errorf("%s: sets its namespace; kustomization.yaml's namespace sets every object's", file)
		}
		m.files[gvk.Kind+"/"+name] = file
	}
	if m.namespace == nil || m.configMap == nil || m.secret == nil || m.peerSecret == nil || m.statefulSet == nil || m.pdb == nil ||
		len(m.services) != 2 || m.podMonitor == nil {
		t.Fatalf("want a Namespace, ConfigMap, two Secrets (%s one), StatefulSet, PodDisruptionBudget, PodMonitor and two Services; got %v",
			peerSecretName,
			slices.Sorted(maps.Keys(m.files)))
	}
	return m
}

// TestStrictDecodingCatchesMistakes checks the check: a field the API does
// not have, or one given twice, must not decode.
func TestStrictDecodingCatchesMistakes(t *testing.T) {
	strict := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, k8sScheme(t), k8sScheme(t),
		kjson.SerializerOptions{Yaml: true, Strict: true})
	tests := []struct{ name, doc string }{
		{"unknown field", "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {clusterIp: None}\n"},
		{"duplicate field", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {A: a}\ndata: {B: b}\n"},
		{"probe in the pod", "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      readinessProbe: {}\n"},
	}
	for _, tt := range tests {
		if _, _, err := strict.Decode([]byte(tt.doc), nil, nil); err == nil {
			t.Errorf("%s: decoded without error", tt.name)
		}
	}
	var k kustomization
	if err := decodeStrict([]byte("resources: [a.yaml]\ncommonLabels: {a: b}\n"), &k); err == nil {
		t.Error("kustomization: an unknown field decoded without error")
	}
}
