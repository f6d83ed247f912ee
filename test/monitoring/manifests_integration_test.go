//go:build integration

package monitoring

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"tusk.dev/tusk/internal/testenv"
)

// TestMonitoringComponentIsAccepted: config/monitoring, added as a
// component to the default install the way docs/monitoring.md says,
// renders with kustomize with the Grafana dashboard's ConfigMap, and the
// API server accepts its PodMonitors and PrometheusRule against the
// Prometheus Operator's own CRDs with strict field validation: a misspelt
// or misplaced field fails here.
func TestMonitoringComponentIsAccepted(t *testing.T) {
	env, err := testenv.Start(testenv.RequirePrometheusOperatorCRDs(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()

	kinds := map[string]int{}
	var dashboard map[string]string
	var podMonitors []string
	for _, obj := range renderWithComponent(t) {
		switch {
		case obj.GetKind() == "PodMonitor":
			podMonitors = append(podMonitors, obj.GetName())
		case obj.GetAPIVersion() == "monitoring.coreos.com/v1":
		case obj.GetKind() == "ConfigMap" && obj.GetName() == "tusk-grafana-dashboard":
			dashboard = obj.GetLabels()
			if data, _, _ := unstructured.NestedString(obj.Object, "data", "tusk-cluster.json"); len(data) < 1000 {
				t.Errorf("the dashboard's ConfigMap holds %d bytes of tusk-cluster.json", len(data))
			}
		default:
			continue // the default install is tested in test/manifests
		}
		kinds[obj.GetKind()]++
		obj.SetNamespace("default")
		if err := env.Client.Create(context.Background(), obj, client.FieldValidation("Strict")); err != nil {
			t.Errorf("%s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
	if kinds["PodMonitor"] != 4 || kinds["PrometheusRule"] != 1 || kinds["ConfigMap"] != 1 {
		t.Errorf("the component rendered %v, want 4 PodMonitors, a PrometheusRule and the dashboard's ConfigMap", kinds)
	}
	slices.Sort(podMonitors)
	if want := []string{"tusk-instances", "tusk-operator", "tusk-poolers", "tusk-probes"}; !slices.Equal(podMonitors, want) {
		t.Errorf("the component's PodMonitors are %v, want %v", podMonitors, want)
	}
	if dashboard["grafana_dashboard"] != "1" {
		t.Errorf("the dashboard's ConfigMap is labelled %v; Grafana's sidecar looks for grafana_dashboard=1", dashboard)
	}
}

// renderWithComponent renders config/default with config/monitoring as a
// component, from a kustomization of the user's.
func renderWithComponent(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	dir := t.TempDir()
	rel := func(to string) string {
		r, err := filepath.Rel(dir, filepath.Join(testenv.RepoRoot(), "config", to))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	k := "resources:\n  - " + rel("default") + "\ncomponents:\n  - " + rel("monitoring") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600); err != nil {
		t.Fatal(err)
	}
	return testenv.Kustomize(t, dir)
}
