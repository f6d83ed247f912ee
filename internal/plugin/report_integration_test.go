//go:build integration

package plugin

import (
	"archive/zip"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/pki"
)

// TestReportRedactsEverySecret: the support bundle holds the cluster, its
// objects and the Events about them, lists its Secrets without values, and
// no password, key or verifier survives in any file, wherever it leaked
// (an Event, a ConfigMap); what it could not read (the logs of a pod no
// kubelet runs) is said in README.txt.
func TestReportRedactsEverySecret(t *testing.T) {
	c, ns := newCluster(t, healthyCluster)
	ctx := context.Background()
	const password, rolePassword = "s3cr3t-pass-42", "r0le-pass-77"
	key, err := pki.NewCA("leak", 24*time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{tuskv1alpha1.LabelCluster: c.Name}
	objects := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "orders-app", Namespace: ns, Labels: labels},
			Data: map[string][]byte{"username": []byte("app"), "password": []byte(password)}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "orders-config", Namespace: ns, Labels: labels},
			Data: map[string]string{"leak": "host=x password=" + password + " and postgresql://app:other-pw-99@orders-rw/app"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "orders-1", Namespace: ns, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "tusk/postgres:15"}}}},
		&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "orders.leak", Namespace: ns},
			InvolvedObject: corev1.ObjectReference{Kind: "PostgresCluster", Name: c.Name, Namespace: ns},
			Reason:         "Leaky", Type: corev1.EventTypeWarning, Count: 1, LastTimestamp: metav1.Now(),
			Message: "the password is " + password + " and the key " + string(key.KeyPEM) + " and SCRAM-SHA-256$4096:c2FsdA==$c3RvcmVk:c2VydmVy"},
		&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "orders-1.started", Namespace: ns},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "orders-1", Namespace: ns},
			Reason:         "Started", Type: corev1.EventTypeNormal, Count: 1, LastTimestamp: metav1.Now(), Message: "started"},
		// A role's password, in a Secret of the user's the cluster's
		// labels do not mark: the role's spec names it.
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "reader-pw", Namespace: ns},
			Data: map[string][]byte{"password": []byte(rolePassword)}},
		&tuskv1alpha1.PostgresRole{ObjectMeta: metav1.ObjectMeta{Name: "orders-reader", Namespace: ns},
			Spec: tuskv1alpha1.PostgresRoleSpec{Cluster: corev1.LocalObjectReference{Name: c.Name}, Name: "reader",
				PasswordSecret: &corev1.LocalObjectReference{Name: "reader-pw"}}},
		&tuskv1alpha1.PostgresDatabase{ObjectMeta: metav1.ObjectMeta{Name: "other-db", Namespace: ns},
			Spec: tuskv1alpha1.PostgresDatabaseSpec{Cluster: corev1.LocalObjectReference{Name: "other"}, Name: "elsewhere", Owner: "x"}},
		&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "orders-reader.refused", Namespace: ns},
			InvolvedObject: corev1.ObjectReference{Kind: "PostgresRole", Name: "orders-reader", Namespace: ns},
			Reason:         "ApplyRefused", Type: corev1.EventTypeWarning, Count: 1, LastTimestamp: metav1.Now(), Message: "refused " + rolePassword},
		&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "other.event", Namespace: ns},
			// Another cluster's pod, whose name starts like this one's.
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "orders-archive-1", Namespace: ns},
			Reason:         "NotAboutIt", Type: corev1.EventTypeNormal, Count: 1, LastTimestamp: metav1.Now(), Message: "elsewhere"},
	}
	for _, o := range objects {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	out := filepath.Join(t.TempDir(), "report.zip")
	if _, err := kubectlTusk(t, kubeconfig, "-n", ns, "report", c.Name, "-o", out); err != nil {
		t.Fatal(err)
	}
	files := readZip(t, out)
	for _, want := range []string{"cluster.yaml", "pods.yaml", "configmaps.yaml", "events.txt", "secrets.txt", "README.txt"} {
		if _, ok := files["orders-report/"+want]; !ok {
			t.Errorf("the report has no %s: %v", want, keys(files))
		}
	}
	expect := map[string][]string{
		"cluster.yaml": {"kind: PostgresCluster", "currentPrimary: orders-1"},
		"events.txt":   {"Leaky", "the password is [REDACTED]", "the key [REDACTED]", "Pod/orders-1 Started", "PostgresRole/orders-reader ApplyRefused"},
		"secrets.txt":  {"orders-app (Opaque): password, username", "reader-pw (Opaque): password"},
		"sql.yaml":     {"kind: PostgresRole", "name: reader"},
		"README.txt":   {"logs/orders-1: the pod has no container started", "instances/orders-1.status.json: the postgres container is not running"},
	}
	for file, wants := range expect {
		for _, want := range wants {
			if !strings.Contains(files["orders-report/"+file], want) {
				t.Errorf("%s lacks %q:\n%s", file, want, files["orders-report/"+file])
			}
		}
	}
	if strings.Contains(files["orders-report/sql.yaml"], "elsewhere") {
		t.Error("sql.yaml holds another cluster's database")
	}
	if strings.Contains(files["orders-report/events.txt"], "NotAboutIt") {
		t.Error("events.txt holds an Event about another object")
	}
	for name, content := range files {
		for _, secret := range []string{password, rolePassword, "other-pw-99", "PRIVATE KEY", "c3RvcmVk"} {
			if strings.Contains(content, secret) {
				t.Errorf("%s holds %q", name, secret)
			}
		}
	}

	if _, err := kubectlTusk(t, kubeconfig, "-n", ns, "report", c.Name, "-o", out); err == nil {
		t.Error("a second report overwrote the first")
	}
}

func readZip(t *testing.T, path string) map[string]string {
	t.Helper()
	r, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	files := map[string]string{}
	for _, f := range r.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(rc)
		_ = rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		files[f.Name] = string(data)
	}
	return files
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
