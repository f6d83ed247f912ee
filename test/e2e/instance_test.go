//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"tusk.dev/tusk/internal/instanceapi"
)

const (
	operatorImage = "tusk/operator:dev"
	e2eSuperuser  = "e2e-superuser-password"
	secretsDir    = "/etc/tusk/secrets"
)

// instancePod is how a PostgreSQL pod runs Tusk's instance manager: an init
// container from the operator image copies the tusk binary into a shared
// emptyDir, and the stock PostgreSQL image runs it as PID 1, with a
// read-only root filesystem under the restricted standard.
func instancePod(name string, role instanceapi.Role, upstream string) *corev1.Pod {
	pod := withVolume(restrictedPod(name, "/tusk-bin/tusk", "instance", "run",
		"--name", name, "--cluster", "e2e", "--role", string(role), "--upstream-host", upstream,
		"--pgdata", "/var/lib/postgresql/data/pgdata",
		"--superuser-password-file", secretsDir+"/superuser",
		"--replication-password-file", secretsDir+"/replication",
		"--app-password-file", secretsDir+"/app"), name, "/var/lib/postgresql/data")
	secure := pod.Spec.Containers[0].SecurityContext
	secure.ReadOnlyRootFilesystem = ptrTo(true)
	pod.Spec.InitContainers = []corev1.Container{{
		Name: "bootstrap-copy", Image: operatorImage, ImagePullPolicy: corev1.PullIfNotPresent,
		Args:            []string{"instance", "bootstrap-copy", "--dest", "/tusk-bin/tusk"},
		SecurityContext: secure.DeepCopy(),
		VolumeMounts:    []corev1.VolumeMount{{Name: "tusk-bin", MountPath: "/tusk-bin"}},
	}}
	pod.Spec.Volumes = append(pod.Spec.Volumes,
		corev1.Volume{Name: "tusk-bin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		corev1.Volume{Name: "run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		corev1.Volume{Name: "secrets", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: "e2e-passwords", DefaultMode: ptrTo[int32](0o440)}}})
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts,
		corev1.VolumeMount{Name: "tusk-bin", MountPath: "/tusk-bin", ReadOnly: true},
		corev1.VolumeMount{Name: "run", MountPath: "/run/tusk"},
		corev1.VolumeMount{Name: "secrets", MountPath: secretsDir, ReadOnly: true})
	c.Ports = []corev1.ContainerPort{{Name: "postgres", ContainerPort: 5432}, {Name: "status", ContainerPort: instanceapi.DefaultStatusPort}}
	probe := func(path string) *corev1.Probe {
		return &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: path, Port: intstr.FromString("status")}}}
	}
	c.ReadinessProbe, c.LivenessProbe = probe(instanceapi.PathReadyz), probe(instanceapi.PathHealthz)
	c.LivenessProbe.PeriodSeconds, c.LivenessProbe.FailureThreshold = 10, 6
	return pod
}

func createPasswords(t *testing.T, ns string) {
	t.Helper()
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-passwords"},
		StringData: map[string]string{"superuser": e2eSuperuser, "replication": "e2e-replication", "app": "e2e-app"},
	}
	if _, err := clientset.CoreV1().Secrets(ns).Create(context.Background(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func createPrimaryService(t *testing.T, ns, primary string) string {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-rw"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": primary},
			Ports:    []corev1.ServicePort{{Name: "postgres", Port: 5432, TargetPort: intstr.FromString("postgres")}},
		},
	}
	if _, err := clientset.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return svc.Name + "." + ns + ".svc.cluster.local"
}

// psqlIn runs SQL in a pod over its unix socket, as the superuser.
func psqlIn(t *testing.T, ns, pod, sql string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := kubectl(ctx, "-n", ns, "exec", pod, "-c", "main", "--", "env", "PGPASSWORD="+e2eSuperuser,
		"psql", "-h", "/run/tusk/socket", "-U", "postgres", "-d", "app", "-XAt", "-v", "ON_ERROR_STOP=1", "-c", sql)
	if err != nil {
		t.Fatalf("psql in %s: %v\n%s", pod, err, out)
	}
	return strings.TrimSpace(out)
}

// TestInstanceManagerInPods: the instance manager delivered into the stock
// tusk/postgres:15 image bootstraps a primary, and a replica cloned from it
// through a Service streams its writes, both under the restricted Pod
// Security Standard with read-only root filesystems.
func TestInstanceManagerInPods(t *testing.T) {
	parallel(t)
	ns := newNamespace(t)
	createPasswords(t, ns)
	createClaim(t, ns, "pg-1")
	createClaim(t, ns, "pg-2")
	start := time.Now()
	createPod(t, ns, instancePod("pg-1", instanceapi.RolePrimary, ""))
	waitPodReady(t, ns, "pg-1", 3*time.Minute)
	t.Logf("primary pod Ready %.1fs after create (initdb included)", time.Since(start).Seconds())
	upstream := createPrimaryService(t, ns, "pg-1")
	psqlIn(t, ns, "pg-1", "CREATE TABLE t (id int); INSERT INTO t VALUES (1), (2)")

	start = time.Now()
	createPod(t, ns, instancePod("pg-2", instanceapi.RoleReplica, upstream))
	waitPodReady(t, ns, "pg-2", 3*time.Minute)
	t.Logf("replica pod Ready %.1fs after create (pg_basebackup included)", time.Since(start).Seconds())
	if got := psqlIn(t, ns, "pg-2", "SELECT pg_is_in_recovery()"); got != "t" {
		t.Fatalf("pg-2 is not a replica: pg_is_in_recovery() = %q", got)
	}
	psqlIn(t, ns, "pg-1", "INSERT INTO t VALUES (3)")
	eventually(t, time.Minute, "the replica to have row 3", func(context.Context) (bool, error) {
		return psqlIn(t, ns, "pg-2", "SELECT count(*) FROM t") == "3", nil
	})
	if got := psqlIn(t, ns, "pg-1", "SELECT application_name || ':' || state FROM pg_stat_replication"); got != "pg-2:streaming" {
		t.Fatalf("the primary sees replication %q, want pg-2:streaming", got)
	}
	if logs := podLogs(t, ns, "pg-1"); !strings.Contains(logs, `"logger":"postgres"`) {
		t.Fatalf("postgres' own log lines are not forwarded as JSON:\n%s", logs)
	}
}
