//go:build e2e

package e2e

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// postgresServer runs initdb on the volume (in a subdirectory: PostgreSQL
// wants a data directory owned by its own user with mode 0700) and starts
// the server. Local connections use peer authentication, remote ones need a
// password that nobody has: enough to prove the server runs.
const postgresServer = `set -e
D=/var/lib/postgresql/data/pgdata
[ -s "$D/PG_VERSION" ] || initdb -D "$D" -U postgres --auth-local=peer --auth-host=scram-sha-256 >/dev/null
exec postgres -D "$D" -c listen_addresses='*'`

func postgresPod() *corev1.Pod {
	pod := withVolume(restrictedPod("pg", "sh", "-c", postgresServer), "pgdata", "/var/lib/postgresql/data")
	c := &pod.Spec.Containers[0]
	c.Ports = []corev1.ContainerPort{{Name: "postgres", ContainerPort: 5432}}
	c.ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"pg_isready", "-h", "127.0.0.1"}}},
		PeriodSeconds: 1,
	}
	return pod
}

// TestPostgresRunsOnVolume: a PostgreSQL pod from tusk/postgres:15, running as
// the image's postgres user under the restricted standard, runs initdb on a
// dynamically provisioned volume and serves; it is reachable through a
// Service name from another pod, and through exec, logs and port-forward.
func TestPostgresRunsOnVolume(t *testing.T) {
	parallel(t)
	ns := newNamespace(t)
	createClaim(t, ns, "pgdata")
	start := time.Now()
	createPod(t, ns, postgresPod())
	waitPodPhase(t, ns, "pg", corev1.PodRunning)
	t.Logf("PostgreSQL pod Running %.1fs after create", time.Since(start).Seconds())
	waitPodReady(t, ns, "pg", 2*time.Minute)
	t.Logf("PostgreSQL pod Ready %.1fs after create (initdb included)", time.Since(start).Seconds())

	checkExec(t, ns)
	checkLogs(t, ns)
	checkServiceFromPod(t, ns)
	checkPortForward(t, ns)
}

func checkExec(t *testing.T, ns string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The image's user, by number, is Debian's postgres user.
	out, err := kubectl(ctx, "exec", "-n", ns, "pg", "--", "id", "-un")
	if err != nil || strings.TrimSpace(out) != "postgres" {
		t.Fatalf("kubectl exec id -un: %v: %q, want postgres", err, out)
	}
	out, err = kubectl(ctx, "exec", "-n", ns, "pg", "--", "psql", "-U", "postgres", "-Atc", "select current_user")
	if err != nil || strings.TrimSpace(out) != "postgres" {
		t.Fatalf("kubectl exec psql: %v: %s", err, out)
	}
}

func checkLogs(t *testing.T, ns string) {
	t.Helper()
	if logs := podLogs(t, ns, "pg"); !strings.Contains(logs, "database system is ready to accept connections") {
		t.Fatalf("PostgreSQL log does not say it is ready:\n%s", logs)
	}
}

func checkServiceFromPod(t *testing.T, ns string) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "pg"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "pg"},
			Ports:    []corev1.ServicePort{{Name: "postgres", Port: 5432, TargetPort: intstr.FromString("postgres")}},
		},
	}
	if _, err := clientset.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating service: %v", err)
	}
	host := "pg." + ns + ".svc.cluster.local"
	createPod(t, ns, restrictedPod("client", "sh", "-c",
		"for i in $(seq 30); do pg_isready -h "+host+" && exit 0; sleep 1; done; exit 1"))
	waitPodPhase(t, ns, "client", corev1.PodSucceeded)
}

// checkPortForward forwards a local port to the pod and sends PostgreSQL's
// SSLRequest: the server answers with one byte, 'S' or 'N'.
func checkPortForward(t *testing.T, ns string) {
	t.Helper()
	cmd := exec.Command("kubectl", "port-forward", "-n", ns, "pod/pg", "25432:5432") // #nosec G204 -- fixed arguments
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting kubectl port-forward: %v", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var answer string
	eventually(t, 30*time.Second, "an answer through kubectl port-forward", func(context.Context) (bool, error) {
		conn, err := net.DialTimeout("tcp", "127.0.0.1:25432", time.Second)
		if err != nil {
			return false, err
		}
		defer func() { _ = conn.Close() }()
		_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := conn.Write([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}); err != nil {
			return false, err
		}
		buf := make([]byte, 1)
		if _, err := conn.Read(buf); err != nil {
			return false, err
		}
		answer = string(buf)
		return true, nil
	})
	if answer != "S" && answer != "N" {
		t.Fatalf("PostgreSQL answered %q to SSLRequest through port-forward", answer)
	}
}
