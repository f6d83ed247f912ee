//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// sqlClientPod is the pod, in each test's namespace, that tests run psql in
// to reach the cluster through its Services, as an application would.
const sqlClientPod = "sql-client"

// sqlTimeout bounds one psql run; a query that takes longer is a hang.
const sqlTimeout = 30 * time.Second

// appClientPod runs command with the app user's credentials of cluster in
// its environment (PGUSER, PGPASSWORD, PGDATABASE from the <cluster>-app
// Secret) and the Secret, ca.crt included, mounted at /etc/tusk, where its
// URIs expect it.
func appClientPod(podName, cluster string, command ...string) *corev1.Pod {
	pod := restrictedPod(podName, command...)
	secret := cluster + "-app"
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "app-secret", VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: secret},
	}})
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "app-secret", MountPath: "/etc/tusk", ReadOnly: true})
	fromSecret := func(env, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: env, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key,
		}}}
	}
	c.Env = append(c.Env, fromSecret("PGUSER", "username"), fromSecret("PGPASSWORD", "password"),
		fromSecret("PGDATABASE", "dbname"), corev1.EnvVar{Name: "PGCONNECT_TIMEOUT", Value: "5"})
	return pod
}

// startSQLClient starts the sql-client pod for cluster and waits for it.
func startSQLClient(t *testing.T, ns, cluster string) {
	t.Helper()
	createPod(t, ns, appClientPod(sqlClientPod, cluster, "sleep", "infinity"))
	waitPodReady(t, ns, sqlClientPod, 2*time.Minute)
}

// serviceConninfo connects to service in ns over TLS, verifying that the
// server's certificate is signed by the cluster's CA and names the host.
func serviceConninfo(ns, service string) string {
	return "host=" + service + "." + ns + ".svc port=5432 sslmode=verify-full sslrootcert=/etc/tusk/ca.crt"
}

// tryPSQLConninfo runs sql in the sql-client pod with the given conninfo and
// returns psql's trimmed output (unaligned, tuples only).
func tryPSQLConninfo(ctx context.Context, ns, conninfo, sql string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, sqlTimeout)
	defer cancel()
	out, err := kubectl(ctx, "exec", "-n", ns, sqlClientPod, "--",
		"psql", conninfo, "-XAtq", "-v", "ON_ERROR_STOP=1", "-c", sql)
	if err != nil {
		return "", fmt.Errorf("psql %q -c %q: %w\n%s", conninfo, sql, err, out)
	}
	return strings.TrimSpace(out), nil
}

// tryPSQL runs sql as the app user through service (such as X-rw).
func tryPSQL(ctx context.Context, ns, service, sql string) (string, error) {
	return tryPSQLConninfo(ctx, ns, serviceConninfo(ns, service), sql)
}

// psql runs sql as the app user through service and fails the test if it
// fails.
func psql(t *testing.T, ns, service, sql string) string {
	t.Helper()
	out, err := tryPSQL(context.Background(), ns, service, sql)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tryInstanceSQL runs sql in the application database on one instance,
// inside its pod, over the Unix socket as the superuser: it reaches an
// instance whatever the Services say about it.
func tryInstanceSQL(ctx context.Context, ns, cluster, pod, sql string) (string, error) {
	app, err := clientset.CoreV1().Secrets(ns).Get(ctx, cluster+"-app", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return tryInstanceSQLIn(ctx, ns, cluster, pod, string(app.Data["dbname"]), sql)
}

// tryInstanceSQLIn is tryInstanceSQL in the database db.
func tryInstanceSQLIn(ctx context.Context, ns, cluster, pod, db, sql string) (string, error) {
	superuser, err := clientset.CoreV1().Secrets(ns).Get(ctx, cluster+"-superuser", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, sqlTimeout)
	defer cancel()
	out, err := kubectl(ctx, "exec", "-n", ns, pod, "-c", "postgres", "--",
		"env", "PGPASSWORD="+string(superuser.Data["password"]),
		"psql", "-h", "/run/tusk/socket", "-U", string(superuser.Data["username"]), "-d", db,
		"-XAtq", "-v", "ON_ERROR_STOP=1", "-c", sql)
	if err != nil {
		return "", fmt.Errorf("psql in %s -c %q: %w\n%s", pod, sql, err, out)
	}
	return strings.TrimSpace(out), nil
}

func instanceSQL(t *testing.T, ns, cluster, pod, sql string) string {
	t.Helper()
	out, err := tryInstanceSQL(context.Background(), ns, cluster, pod, sql)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitSameOnEveryInstance waits until sql returns want on every pod of the
// cluster (replicas replay asynchronously, even under synchronous commit).
func waitSameOnEveryInstance(t *testing.T, ns, cluster, sql, want string, timeout time.Duration) {
	t.Helper()
	what := fmt.Sprintf("%q to return %q on every instance of %s", sql, want, cluster)
	eventuallyEvery(t, timeout, time.Second, what, func(ctx context.Context) (bool, error) {
		pods, err := clusterPods(ctx, ns, cluster)
		if err != nil || len(pods) == 0 {
			return false, err
		}
		for _, p := range pods {
			got, err := tryInstanceSQL(ctx, ns, cluster, p.Name, sql)
			if err != nil {
				return false, err
			}
			if got != want {
				return false, fmt.Errorf("%s returned %q", p.Name, got)
			}
		}
		return true, nil
	})
}

// writerLoop runs $SQL through $CONNINFO every 200ms, a new connection each
// time (so that it follows the -rw Service to a new primary), and prints ok
// or failed for each attempt. statement_timeout keeps a statement sent to a
// primary on its way down from hanging the loop.
const writerLoop = `while :; do
  if PGOPTIONS='-c statement_timeout=5000' psql "$CONNINFO" -XAtq -v ON_ERROR_STOP=1 -c "$SQL" >/dev/null 2>&1
  then echo ok; else echo failed; fi
  sleep 0.2
done`

// startWriter starts a pod that runs sql through cluster's -rw Service in a
// loop until the test ends.
func startWriter(t *testing.T, ns, cluster, podName, sql string) {
	t.Helper()
	pod := appClientPod(podName, cluster, "sh", "-c", writerLoop)
	c := &pod.Spec.Containers[0]
	c.Env = append(c.Env, corev1.EnvVar{Name: "CONNINFO", Value: serviceConninfo(ns, cluster+"-rw")},
		corev1.EnvVar{Name: "SQL", Value: sql})
	createPod(t, ns, pod)
	waitPodReady(t, ns, podName, 2*time.Minute)
}

// writerAttempts counts the writer's successful and failed attempts so far.
func writerAttempts(t *testing.T, ns, podName string) (ok, failed int) {
	t.Helper()
	for _, line := range strings.Split(podLogs(t, ns, podName), "\n") {
		switch strings.TrimSpace(line) {
		case "ok":
			ok++
		case "failed":
			failed++
		}
	}
	return ok, failed
}

// countRows returns SELECT count(*) FROM table through service.
func countRows(ctx context.Context, ns, service, table string) (int, error) {
	out, err := tryPSQL(ctx, ns, service, "SELECT count(*) FROM "+table)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(out)
}
