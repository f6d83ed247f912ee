//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// prometheusImage is Prometheus built from the Go module proxy
// (hack/install-prometheus.sh) and loaded by make test-images.
const prometheusImage = "tusk/prometheus:dev"

// TestShippedMonitoringOnARealPrometheus runs a real Prometheus in the
// cluster with the shipped scrape configuration and rule file, as
// docs/monitoring.md says to (plain Prometheus, the metrics reader role),
// and checks through its HTTP API that it scrapes the operator, every
// instance and the SLI probe, that every rule evaluates without error on
// real series, and that a fault raises the right alerts: the primary
// fenced makes TuskPrimaryMissing pending, then firing, and the probe's
// failed writes burn the error budget fast enough to page; unfenced, the
// primary alert clears. A replica fenced makes TuskInstancesNotReady
// pending, a replica whose replay is paused TuskReplicaLagging (pending,
// then cleared once it replays again), and the object store stopped
// TuskArchiveFailing. Then `kubectl tusk report` bundles the cluster
// (checkReport).
func TestShippedMonitoringOnARealPrometheus(t *testing.T) {
	parallel(t)
	ns := newNamespace(t)
	s3 := startS3(t, ns)
	const name = "mon"
	pgc := newCluster(ns, name, 3)
	pgc.Spec.Backup = &tuskv1alpha1.BackupSpec{ObjectStore: s3.ObjectStore("")}
	pgc.Spec.Monitoring = &tuskv1alpha1.MonitoringSpec{Probe: &tuskv1alpha1.ProbeSpec{Interval: &metav1.Duration{Duration: time.Second}}}
	pgc.Spec.NetworkPolicy = &tuskv1alpha1.NetworkPolicySpec{MetricsFrom: []networkingv1.NetworkPolicyPeer{
		{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "prometheus"}}},
	}}
	createCluster(t, pgc, "")
	prom := deployPrometheus(t, ns)
	waitReadyCondition(t, ns, name)
	waitHealthy(t, ns, name, 3, time.Minute)

	sel := fmt.Sprintf(`namespace=%q, cluster=%q`, ns, name)
	for query, want := range map[string]float64{
		`count(up{job="tusk-instances", ` + sel + `} == 1)`:     3,
		`count(up{job="tusk-probes", ` + sel + `} == 1)`:        1,
		`count(up{job="tusk-operator"} == 1)`:                   1,
		`max(tusk_cluster_ready{` + sel + `})`:                  1,
		`count(tusk_pg_role{role="primary", ` + sel + `} == 1)`: 1,
	} {
		eventuallyEvery(t, 2*time.Minute, 2*time.Second, query+" = "+fmt.Sprint(want), func(ctx context.Context) (bool, error) {
			got, ok, err := prom.scalar(ctx, query)
			return ok && got == want, err
		})
	}
	prom.waitRulesEvaluatedWithoutError(t)

	primary := currentPrimary(t, ns, name)
	fencedAt := time.Now()
	setFencedAnnotation(t, ns, name, primary)
	prom.waitAlert(t, "TuskPrimaryMissing", map[string]string{"namespace": ns, "cluster": name}, "pending", time.Minute)
	prom.waitAlert(t, "TuskErrorBudgetBurnFast", map[string]string{"namespace": ns, "cluster": name, "target": "rw"}, "firing", 2*time.Minute)
	prom.waitAlert(t, "TuskPrimaryMissing", map[string]string{"namespace": ns, "cluster": name}, "firing", 3*time.Minute)
	t.Logf("figure: primary fenced → TuskPrimaryMissing firing after %.0fs (for: 1m)", time.Since(fencedAt).Seconds())

	setFencedAnnotation(t, ns, name)
	unfencedAt := time.Now()
	prom.waitAlert(t, "TuskPrimaryMissing", map[string]string{"namespace": ns, "cluster": name}, "", 2*time.Minute)
	t.Logf("figure: primary unfenced → TuskPrimaryMissing cleared after %.0fs", time.Since(unfencedAt).Seconds())
	waitHealthy(t, ns, name, 3, clusterChangeTimeout)

	// A replica stopped: it has no replay lag to report, and the cluster
	// has fewer ready instances than it asks for.
	cluster := map[string]string{"namespace": ns, "cluster": name}
	replica := otherInstance(t, ns, name, currentPrimary(t, ns, name))
	setFencedAnnotation(t, ns, name, replica)
	prom.waitAlert(t, "TuskInstancesNotReady", cluster, "pending", 2*time.Minute)
	setFencedAnnotation(t, ns, name)
	prom.waitAlert(t, "TuskInstancesNotReady", cluster, "", 2*time.Minute)
	waitHealthy(t, ns, name, 3, clusterChangeTimeout)

	// A replica that stops replaying while the probe keeps writing falls
	// behind: the primary reports its replay lag growing.
	lagging := map[string]string{"namespace": ns, "cluster": name, "replica": replica}
	instanceSQL(t, ns, name, replica, "SELECT pg_wal_replay_pause()")
	prom.waitAlert(t, "TuskReplicaLagging", lagging, "pending", 3*time.Minute)
	instanceSQL(t, ns, name, replica, "SELECT pg_wal_replay_resume()")
	prom.waitAlert(t, "TuskReplicaLagging", lagging, "", 3*time.Minute)

	// The object store stopped: the next segment cannot be archived.
	if err := clientset.CoreV1().Pods(ns).Delete(context.Background(), s3Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	instanceSQL(t, ns, name, currentPrimary(t, ns, name), "SELECT pg_switch_wal()")
	prom.waitAlert(t, "TuskArchiveFailing", cluster, "pending", 3*time.Minute)

	// After all that, the support bundle of the cluster.
	checkReport(t, ns, name)
}

// otherInstance names an instance of the cluster other than not.
func otherInstance(t *testing.T, ns, cluster, not string) string {
	t.Helper()
	for _, in := range mustGetCluster(t, ns, cluster).Status.Instances {
		if in.Name != not {
			return in.Name
		}
	}
	t.Fatalf("cluster %s has no instance but %s", cluster, not)
	return ""
}

// promServer is a Prometheus pod, reached through the API server's proxy.
type promServer struct {
	ns, pod string
}

// deployPrometheus runs Prometheus in ns with the shipped scrape jobs and
// rules, scraping and evaluating every 5 s. Its ServiceAccount may list
// pods everywhere (kubernetes_sd) and read the operator's metrics
// (tusk-metrics-reader), as docs/monitoring.md asks.
func deployPrometheus(t *testing.T, ns string) *promServer {
	t.Helper()
	ctx := context.Background()
	repo := filepath.Join("..", "..", "config", "monitoring", "prometheus")
	var jobs []any
	readShippedYAML(t, filepath.Join(repo, "scrape-configs.yaml"), &jobs)
	rules, err := os.ReadFile(filepath.Join(repo, "tusk-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	config, err := yaml.Marshal(map[string]any{
		"global":         map[string]string{"scrape_interval": "5s", "evaluation_interval": "5s"},
		"rule_files":     []string{"/etc/prometheus/tusk-rules.yaml"},
		"scrape_configs": jobs,
	})
	if err != nil {
		t.Fatal(err)
	}
	clusterWide := "e2e-prometheus-" + ns
	labels := map[string]string{"app": "prometheus"}
	objects := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "prometheus", Namespace: ns}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: clusterWide}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
		}},
		clusterRoleBinding(clusterWide, clusterWide, ns),
		clusterRoleBinding(clusterWide+"-metrics", "tusk-metrics-reader", ns),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "prometheus", Namespace: ns}, Data: map[string]string{
			"prometheus.yml": string(config), "tusk-rules.yaml": string(rules),
		}},
		prometheusDeployment(ns, labels),
	}
	for _, obj := range objects {
		if err := kube.Create(ctx, obj); err != nil {
			t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
		}
		if obj.GetNamespace() == "" {
			t.Cleanup(func() { _ = kube.Delete(context.Background(), obj) })
		}
	}
	p := &promServer{ns: ns}
	eventually(t, 2*time.Minute, "a ready Prometheus pod", func(ctx context.Context) (bool, error) {
		pods, err := clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=prometheus"})
		if err != nil {
			return false, err
		}
		for i := range pods.Items {
			if podIsReady(&pods.Items[i]) {
				p.pod = pods.Items[i].Name
				return true, nil
			}
		}
		return false, nil
	})
	return p
}

func readShippedYAML(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func clusterRoleBinding(name, role, ns string) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: ns}},
	}
}

func prometheusDeployment(ns string, labels map[string]string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: "prometheus",
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), FSGroup: ptr.To[int64](65532),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name: "prometheus", Image: prometheusImage, ImagePullPolicy: corev1.PullIfNotPresent,
						Args: []string{"--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/data",
							"--web.listen-address=:9090"},
						Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 9090}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Path: "/-/ready", Port: intstr.FromString("web"),
						}}, PeriodSeconds: 2},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "config", MountPath: "/etc/prometheus", ReadOnly: true},
							{Name: "data", MountPath: "/data"},
						},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
					Volumes: []corev1.Volume{
						{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: "prometheus"},
						}}},
						{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					},
				},
			},
		},
	}
}

// api GETs a Prometheus HTTP API path and decodes its data field.
func (p *promServer) api(ctx context.Context, path string, params map[string]string, into any) error {
	raw, err := clientset.CoreV1().Pods(p.ns).ProxyGet("http", p.pod, "9090", path, params).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	var resp struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &resp); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.Status != "success" {
		return fmt.Errorf("GET %s: %s", path, resp.Error)
	}
	return json.Unmarshal(resp.Data, into)
}

// scalar runs an instant query that yields at most one sample; ok is
// false when it yields none.
func (p *promServer) scalar(ctx context.Context, query string) (value float64, ok bool, err error) {
	var data struct {
		Result []struct {
			Value [2]any `json:"value"`
		} `json:"result"`
	}
	if err := p.api(ctx, "/api/v1/query", map[string]string{"query": query}, &data); err != nil {
		return 0, false, err
	}
	if len(data.Result) == 0 {
		return 0, false, nil
	}
	s, _ := data.Result[0].Value[1].(string)
	_, err = fmt.Sscan(s, &value)
	return value, err == nil, err
}

// waitRulesEvaluatedWithoutError waits until every rule of the shipped
// file has been evaluated, and fails on any that errs (a many-to-many
// match or a type error shows only on real series).
func (p *promServer) waitRulesEvaluatedWithoutError(t *testing.T) {
	t.Helper()
	var pending []string
	eventuallyEvery(t, time.Minute, 2*time.Second, "every rule evaluated", func(ctx context.Context) (bool, error) {
		var data struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		}
		if err := p.api(ctx, "/api/v1/rules", nil, &data); err != nil {
			return false, err
		}
		pending = pending[:0]
		count := 0
		for _, g := range data.Groups {
			for _, r := range g.Rules {
				count++
				switch r.Health {
				case "ok":
				case "err":
					t.Errorf("rule %s of %s fails on real series: %s", r.Name, g.Name, r.LastError)
				default:
					pending = append(pending, r.Name)
				}
			}
		}
		if count < 20 {
			return false, fmt.Errorf("Prometheus loaded %d rules", count)
		}
		return len(pending) == 0, nil
	})
}

// waitAlert waits until the alert with these labels is in state
// (pending or firing), or gone when state is "".
func (p *promServer) waitAlert(t *testing.T, alert string, labels map[string]string, state string, timeout time.Duration) {
	t.Helper()
	what := fmt.Sprintf("%s%v %s", alert, labels, cmp.Or(state, "cleared"))
	eventuallyEvery(t, timeout, 2*time.Second, what, func(ctx context.Context) (bool, error) {
		var data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		}
		if err := p.api(ctx, "/api/v1/alerts", nil, &data); err != nil {
			return false, err
		}
		var states []string
		for _, a := range data.Alerts {
			if a.Labels["alertname"] != alert {
				continue
			}
			match := true
			for k, v := range labels {
				match = match && a.Labels[k] == v
			}
			if match {
				states = append(states, a.State)
			}
		}
		if state == "" {
			return len(states) == 0, nil
		}
		return slices.Contains(states, state), nil
	})
}
