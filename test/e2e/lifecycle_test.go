//go:build e2e

package e2e

// The lifecycle tests drive PostgresClusters through the deployed operator:
// create, use over TLS, scale, heal, reconfigure, roll out images, survive
// an operator restart, delete.
//
// They run in parallel with the other tests, each cluster in its own
// namespace, but for TestOperatorRestartChangesNothing, which restarts the
// operator that every test shares (see parallel and serial). The
// create-to-Ready times they log are taken under that load.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// TestClusterLifecycle: a three-instance cluster comes up Ready with its
// pods, volumes, Services, Secrets and CA; serves over TLS only, writes on
// -rw and reads on -ro; scales up to five and down to two (removing the
// newest replicas and their volumes, keeping the primary); and heals a
// replica whose pod, then whose pod and volume, are deleted.
func TestClusterLifecycle(t *testing.T) {
	parallel(t)
	ns := newNamespace(t)
	const name = "life"
	createCluster(t, newCluster(ns, name, 3), "")
	took := waitReadyCondition(t, ns, name)
	t.Logf("3-instance cluster Ready %.0fs after create (kubectl wait --for=condition=Ready)", took.Seconds())
	waitHealthy(t, ns, name, 3, time.Minute)
	checkClusterObjects(t, ns, name)

	startSQLClient(t, ns, name)
	psql(t, ns, name+"-rw", "CREATE TABLE lifecycle (id int PRIMARY KEY)")
	insertRows(t, ns, name, 1, 100)
	checkServiceRoles(t, ns, name, 100)
	checkTLSOnly(t, ns, name)
	checkClientAccess(t, ns, name)

	scaleUpAndDown(t, ns, name, 100)
	healDeletedReplicaPod(t, ns, name, 101)
	recloneDeletedReplica(t, ns, name, 102)
}

// insertRows writes ids from..to into the lifecycle table through -rw.
func insertRows(t *testing.T, ns, cluster string, from, to int) {
	t.Helper()
	psql(t, ns, cluster+"-rw", fmt.Sprintf("INSERT INTO lifecycle SELECT generate_series(%d, %d)", from, to))
}

// waitRowsEverywhere waits until every instance has exactly rows rows in the
// lifecycle table.
func waitRowsEverywhere(t *testing.T, ns, cluster string, rows int) {
	t.Helper()
	waitSameOnEveryInstance(t, ns, cluster, "SELECT count(*) FROM lifecycle", strconv.Itoa(rows), 2*time.Minute)
}

// checkClusterObjects checks what the operator creates for a cluster: one
// labelled pod per instance on a bound volume of its name, one primary (the
// one status names), the three Services, the two Secrets and the CA.
func checkClusterObjects(t *testing.T, ns, cluster string) {
	t.Helper()
	pgc := mustGetCluster(t, ns, cluster)
	pods := mustClusterPods(t, ns, cluster)
	if primaries := podsWithRole(pods, tuskv1alpha1.RolePrimary); len(primaries) != 1 || primaries[0] != pgc.Status.CurrentPrimary {
		t.Fatalf("pods labelled primary: %v; status.currentPrimary: %q", primaries, pgc.Status.CurrentPrimary)
	}
	for i := range pods {
		checkInstancePod(t, ns, cluster, &pods[i], pgc)
	}
	for _, suffix := range []string{"-rw", "-ro", "-r"} {
		svc, err := clientset.CoreV1().Services(ns).Get(context.Background(), cluster+suffix, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("Service %s%s: %v", cluster, suffix, err)
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 5432 {
			t.Fatalf("Service %s ports are %+v, want 5432", svc.Name, svc.Spec.Ports)
		}
	}
	checkSecrets(t, ns, cluster)
}

// checkInstancePod checks one instance pod's name, labels, volume and role.
func checkInstancePod(t *testing.T, ns, cluster string, p *corev1.Pod, pgc *tuskv1alpha1.PostgresCluster) {
	t.Helper()
	if !strings.HasPrefix(p.Name, cluster+"-") || instanceSerial(p.Name) < 1 {
		t.Errorf("pod %s is not named %s-<serial>", p.Name, cluster)
	}
	if p.Labels[labelInstance] != p.Name {
		t.Errorf("pod %s has %s=%q", p.Name, labelInstance, p.Labels[labelInstance])
	}
	role := p.Labels[labelRole]
	if role != string(tuskv1alpha1.RolePrimary) && role != string(tuskv1alpha1.RoleReplica) {
		t.Errorf("pod %s has %s=%q", p.Name, labelRole, role)
	}
	i := slices.IndexFunc(pgc.Status.Instances, func(s tuskv1alpha1.InstanceStatus) bool { return s.Name == p.Name })
	if i < 0 || string(pgc.Status.Instances[i].Role) != role {
		t.Errorf("status.instances does not report pod %s as a %s: %+v", p.Name, role, pgc.Status.Instances)
	}
	claim, err := clientset.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), p.Name, metav1.GetOptions{})
	switch {
	case err != nil:
		t.Errorf("PVC of instance %s: %v", p.Name, err)
	case claim.Status.Phase != corev1.ClaimBound:
		t.Errorf("PVC %s is %s, want Bound", p.Name, claim.Status.Phase)
	}
	mounted := slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool {
		return v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == p.Name
	})
	if !mounted {
		t.Errorf("pod %s does not mount PVC %s", p.Name, p.Name)
	}
}

// checkSecrets checks the keys of the superuser and app Secrets, that the
// app Secret points at -rw, and that its ca.crt is the published CA.
func checkSecrets(t *testing.T, ns, cluster string) {
	t.Helper()
	ctx := context.Background()
	secrets := map[string]*corev1.Secret{}
	for _, name := range []string{cluster + "-superuser", cluster + "-app"} {
		s, err := clientset.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("Secret %s: %v", name, err)
		}
		for _, key := range []string{"username", "password", "dbname", "host", "port", "uri", "jdbc-uri", "ca.crt"} {
			if len(s.Data[key]) == 0 {
				t.Errorf("Secret %s has no %s", name, key)
			}
		}
		secrets[name] = s
	}
	app := secrets[cluster+"-app"]
	if host, want := string(app.Data["host"]), cluster+"-rw."+ns+".svc"; host != want {
		t.Errorf("Secret %s-app host is %q, want %q", cluster, host, want)
	}
	if port := string(app.Data["port"]); port != "5432" {
		t.Errorf("Secret %s-app port is %q, want 5432", cluster, port)
	}
	ca, err := clientset.CoreV1().ConfigMaps(ns).Get(ctx, cluster+"-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("ConfigMap %s-ca: %v", cluster, err)
	}
	if ca.Data["ca.crt"] == "" || ca.Data["ca.crt"] != string(app.Data["ca.crt"]) {
		t.Errorf("ConfigMap %s-ca ca.crt (%d bytes) is not the app Secret's ca.crt (%d bytes)",
			cluster, len(ca.Data["ca.crt"]), len(app.Data["ca.crt"]))
	}
}

// checkServiceRoles checks that -rw reaches the primary, -ro a replica, and
// that the rows written are readable through -ro and -r.
func checkServiceRoles(t *testing.T, ns, cluster string, rows int) {
	t.Helper()
	if got := psql(t, ns, cluster+"-rw", "SELECT pg_is_in_recovery()"); got != "f" {
		t.Fatalf("%s-rw reached a server in recovery (pg_is_in_recovery() = %q)", cluster, got)
	}
	if got := psql(t, ns, cluster+"-ro", "SELECT pg_is_in_recovery()"); got != "t" {
		t.Fatalf("%s-ro reached a primary (pg_is_in_recovery() = %q)", cluster, got)
	}
	for _, service := range []string{cluster + "-ro", cluster + "-r"} {
		eventuallyEvery(t, time.Minute, time.Second, fmt.Sprintf("%d rows through %s", rows, service),
			func(ctx context.Context) (bool, error) {
				n, err := countRows(ctx, ns, service, "lifecycle")
				return n == rows, err
			})
	}
}

// checkTLSOnly checks that every name of every Service verifies against the
// cluster CA (verify-full), that connections are encrypted, and that the
// server refuses a connection without TLS.
func checkTLSOnly(t *testing.T, ns, cluster string) {
	t.Helper()
	ctx := context.Background()
	for _, suffix := range []string{"-rw", "-ro", "-r"} {
		svc := cluster + suffix
		for _, host := range []string{svc, svc + "." + ns, svc + "." + ns + ".svc", svc + "." + ns + ".svc.cluster.local"} {
			conninfo := "host=" + host + " port=5432 sslmode=verify-full sslrootcert=/etc/tusk/ca.crt"
			out, err := tryPSQLConninfo(ctx, ns, conninfo, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
			if err != nil {
				t.Fatalf("TLS with certificate verification to %s: %v", host, err)
			}
			if out != "t" {
				t.Fatalf("connection to %s is not encrypted: pg_stat_ssl.ssl = %q", host, out)
			}
		}
	}
	out, err := tryPSQLConninfo(ctx, ns, "host="+cluster+"-rw."+ns+".svc port=5432 sslmode=disable", "SELECT 1")
	if err == nil {
		t.Fatalf("%s-rw accepted a connection without TLS (returned %q)", cluster, out)
	}
	t.Logf("without TLS, as expected: %v", err)
}

// checkClientAccess checks what an application gets: the app Secret's uri,
// used as it is where the Secret is mounted (/etc/tusk), connects and
// verifies the server; the superuser is refused over the network by
// pg_hba.conf before any password is asked (so the app's password, sent
// as the superuser's, tells a refusal from a wrong password).
func checkClientAccess(t *testing.T, ns, cluster string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sqlTimeout)
	defer cancel()
	out, err := kubectl(ctx, "exec", "-n", ns, sqlClientPod, "--", "sh", "-c",
		`psql "$(cat /etc/tusk/uri)" -XAtq -c "SELECT current_user || ' ' || ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"`)
	if err != nil || strings.TrimSpace(out) != "app true" {
		t.Fatalf("the app Secret's uri, mounted at /etc/tusk: %q, %v; want the app user over TLS", out, err)
	}
	_, err = tryPSQLConninfo(ctx, ns, "host="+cluster+"-rw."+ns+".svc port=5432 user=postgres sslmode=verify-full sslrootcert=/etc/tusk/ca.crt", "SELECT 1")
	if err == nil || !strings.Contains(err.Error(), "pg_hba.conf rejects") {
		t.Fatalf("the superuser over the network: %v; want pg_hba.conf to reject it", err)
	}
}

// scaleUpAndDown scales 3 → 5 → 2 and checks that data reaches the new
// instances and that scaling down keeps the primary and the oldest replicas
// and deletes the removed instances' volumes.
func scaleUpAndDown(t *testing.T, ns, cluster string, rows int) {
	t.Helper()
	start := time.Now()
	scaleCluster(t, ns, cluster, 5)
	waitHealthy(t, ns, cluster, 5, clusterChangeTimeout)
	t.Logf("scaled 3 → 5 in %.0fs", time.Since(start).Seconds())
	waitRowsEverywhere(t, ns, cluster, rows)

	before := podNames(mustClusterPods(t, ns, cluster))
	primary := mustGetCluster(t, ns, cluster).Status.CurrentPrimary
	scaleCluster(t, ns, cluster, 2)
	waitHealthy(t, ns, cluster, 2, clusterChangeTimeout)
	after := podNames(mustClusterPods(t, ns, cluster))
	if want := keptByScaleDown(before, primary, 2); !slices.Equal(after, want) {
		t.Fatalf("scaling %v (primary %s) down to 2 kept %v, want %v", before, primary, after, want)
	}
	if now := mustGetCluster(t, ns, cluster).Status.CurrentPrimary; now != primary {
		t.Fatalf("scaling down changed the primary from %s to %s", primary, now)
	}
	for _, removed := range before {
		if !slices.Contains(after, removed) {
			waitClaimGone(t, ns, removed, "")
		}
	}
	waitRowsEverywhere(t, ns, cluster, rows)
}

// keptByScaleDown is which of instances (sorted by serial) scaling down to n
// keeps: the primary and the n-1 replicas with the lowest serials.
func keptByScaleDown(instances []string, primary string, n int) []string {
	kept := []string{primary}
	for _, name := range instances {
		if len(kept) < n && name != primary {
			kept = append(kept, name)
		}
	}
	slices.SortFunc(kept, func(a, b string) int { return instanceSerial(a) - instanceSerial(b) })
	return kept
}

// waitClaimGone waits until PVC name is deleted; with uid set, a new PVC of
// the same name but another UID counts as the old one gone.
func waitClaimGone(t *testing.T, ns, name string, uid types.UID) {
	t.Helper()
	eventually(t, 2*time.Minute, "PVC "+name+" deleted", func(ctx context.Context) (bool, error) {
		c, err := clientset.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && uid != "" && c.UID != uid, err
	})
}

// healDeletedReplicaPod deletes a replica's pod and waits for the operator
// to recreate it on its volume and for the cluster to be whole again.
func healDeletedReplicaPod(t *testing.T, ns, cluster string, rows int) {
	t.Helper()
	ctx := context.Background()
	replica := firstReplica(t, ns, cluster)
	old, err := clientset.CoreV1().Pods(ns).Get(ctx, replica, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := clientset.CoreV1().Pods(ns).Delete(ctx, replica, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting replica pod %s: %v", replica, err)
	}
	eventually(t, clusterChangeTimeout, "replica pod "+replica+" recreated and Ready", func(ctx context.Context) (bool, error) {
		p, err := clientset.CoreV1().Pods(ns).Get(ctx, replica, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && p.UID != old.UID && podIsReady(p), err
	})
	waitHealthy(t, ns, cluster, 2, clusterChangeTimeout)
	t.Logf("replica pod %s recreated and cluster Healthy %.0fs after its deletion", replica, time.Since(start).Seconds())
	insertRows(t, ns, cluster, rows, rows)
	waitRowsEverywhere(t, ns, cluster, rows)
}

// recloneDeletedReplica deletes a replica's volume and pod and waits for a
// replica cloned afresh from the primary, with all the data.
func recloneDeletedReplica(t *testing.T, ns, cluster string, rows int) {
	t.Helper()
	ctx := context.Background()
	replica := firstReplica(t, ns, cluster)
	claim, err := clientset.CoreV1().PersistentVolumeClaims(ns).Get(ctx, replica, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// The PVC stays Terminating (kubernetes.io/pvc-protection) until its pod is gone.
	if err := clientset.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, replica, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting PVC %s: %v", replica, err)
	}
	if err := clientset.CoreV1().Pods(ns).Delete(ctx, replica, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting replica pod %s: %v", replica, err)
	}
	waitClaimGone(t, ns, replica, claim.UID)
	waitHealthy(t, ns, cluster, 2, clusterChangeTimeout)
	t.Logf("replica re-cloned and cluster Healthy %.0fs after deleting %s and its PVC (instances now %v)",
		time.Since(start).Seconds(), replica, podNames(mustClusterPods(t, ns, cluster)))
	insertRows(t, ns, cluster, rows, rows)
	waitRowsEverywhere(t, ns, cluster, rows)
}

// TestReconfigure: a reloadable parameter reaches every instance without a
// restart; a parameter that needs a restart rolls through the instances,
// replicas first and the primary last, never more than one down at a time,
// while a writer keeps writing through -rw.
func TestReconfigure(t *testing.T) {
	parallel(t)
	ns := newNamespace(t)
	const name = "reconf"
	createCluster(t, newCluster(ns, name, 3), "")
	waitReadyCondition(t, ns, name)
	waitHealthy(t, ns, name, 3, time.Minute)
	startSQLClient(t, ns, name)

	before := mustSnapshotPods(t, ns, name)
	startedBefore := postmasterStartTimes(t, ns, name)
	setParameters(t, ns, name, map[string]string{"work_mem": "7MB"})
	waitSameOnEveryInstance(t, ns, name, "SHOW work_mem", "7MB", 2*time.Minute)
	waitHealthy(t, ns, name, 3, clusterChangeTimeout)
	if got := psql(t, ns, name+"-rw", "SHOW work_mem"); got != "7MB" {
		t.Fatalf("a new session through %s-rw has work_mem %s, want 7MB", name, got)
	}
	if err := samePods(context.Background(), ns, name, before); err != nil {
		t.Fatalf("a reloadable parameter restarted pods: %v", err)
	}
	if started := postmasterStartTimes(t, ns, name); !maps.Equal(started, startedBefore) {
		t.Fatalf("a reloadable parameter restarted PostgreSQL: started at %v, now at %v", startedBefore, started)
	}

	rollingRestart(t, ns, name)
	lowerHotStandbySetting(t, ns, name)
}

// lowerHotStandbySetting lowers max_connections, which a standby must have
// at least as high as its primary: the primary restarts first, then the
// replicas, and every instance ends up serving with the new value.
func lowerHotStandbySetting(t *testing.T, ns, cluster string) {
	t.Helper()
	primary := mustGetCluster(t, ns, cluster).Status.CurrentPrimary
	setParameters(t, ns, cluster, map[string]string{"max_connections": "120"})
	waitSameOnEveryInstance(t, ns, cluster, "SHOW max_connections", "120", clusterChangeTimeout)
	waitHealthy(t, ns, cluster, 3, clusterChangeTimeout)
	started := postmasterStartTimes(t, ns, cluster)
	for name, at := range started {
		if name != primary && at < started[primary] {
			t.Errorf("replica %s restarted (%.1f) before the primary %s (%.1f) while max_connections was lowered", name, at, primary, started[primary])
		}
	}
	if now := mustGetCluster(t, ns, cluster).Status.CurrentPrimary; now != primary {
		t.Errorf("lowering max_connections switched the primary from %s to %s; it restarts in place", primary, now)
	}
}

// rollingRestart changes max_connections under a writer and checks the
// rollout's order, its availability and the longest write gap.
func rollingRestart(t *testing.T, ns, cluster string) {
	t.Helper()
	psql(t, ns, cluster+"-rw", "CREATE TABLE ticks (at timestamptz NOT NULL DEFAULT clock_timestamp())")
	startWriter(t, ns, cluster, "writer", "INSERT INTO ticks DEFAULT VALUES")
	eventuallyEvery(t, time.Minute, time.Second, "the writer's first rows", func(ctx context.Context) (bool, error) {
		n, err := countRows(ctx, ns, cluster+"-rw", "ticks")
		return n >= 5, err
	})
	primary := mustGetCluster(t, ns, cluster).Status.CurrentPrimary
	startedBefore := postmasterStartTimes(t, ns, cluster)
	stopWatching := watchUnreadyInstances(t, ns, cluster, 3)

	start := time.Now()
	setParameters(t, ns, cluster, map[string]string{"max_connections": "150"})
	waitSameOnEveryInstance(t, ns, cluster, "SHOW max_connections", "150", clusterChangeTimeout)
	waitHealthy(t, ns, cluster, 3, clusterChangeTimeout)
	mostUnready := stopWatching()
	t.Logf("rolling restart for max_connections done in %.0fs; primary %s → %s",
		time.Since(start).Seconds(), primary, mustGetCluster(t, ns, cluster).Status.CurrentPrimary)

	checkRestartOrder(t, startedBefore, postmasterStartTimes(t, ns, cluster), primary)
	// Every instance, the stepped-down primary included, follows the new
	// primary's timeline: a table created now reaches all of them.
	psql(t, ns, cluster+"-rw", "CREATE TABLE after_rollout ()")
	waitSameOnEveryInstance(t, ns, cluster, "SELECT count(*) FROM pg_tables WHERE tablename = 'after_rollout'", "1", 2*time.Minute)
	if mostUnready > 1 {
		t.Errorf("%d instances were unready at once during the rolling restart, want at most 1", mostUnready)
	}
	checkWritesResume(t, ns, cluster)
}

// postmasterStartTimes is pg_postmaster_start_time() of each instance, in
// seconds since the epoch: it changes whenever PostgreSQL restarts, whether
// its pod is recreated or not.
func postmasterStartTimes(t *testing.T, ns, cluster string) map[string]float64 {
	t.Helper()
	times := map[string]float64{}
	for _, p := range mustClusterPods(t, ns, cluster) {
		out := instanceSQL(t, ns, cluster, p.Name, "SELECT extract(epoch FROM pg_postmaster_start_time())")
		v, err := strconv.ParseFloat(out, 64)
		if err != nil {
			t.Fatalf("pg_postmaster_start_time() of %s: %q", p.Name, out)
		}
		times[p.Name] = v
	}
	return times
}

// checkRestartOrder checks that every instance restarted and that the one
// that was primary restarted last.
func checkRestartOrder(t *testing.T, before, after map[string]float64, primary string) {
	t.Helper()
	for name, was := range before {
		is, ok := after[name]
		if !ok || is <= was {
			t.Errorf("instance %s did not restart (PostgreSQL started at %.3f, now %.3f)", name, was, is)
		}
		if name != primary && is >= after[primary] {
			t.Errorf("replica %s restarted at %.3f, after the primary %s at %.3f: the primary must go last",
				name, is, primary, after[primary])
		}
	}
}

// watchUnreadyInstances samples, every half second until the returned stop
// is called (or the test ends), how many of the cluster's instances are
// down, and stop returns the most seen at once.
func watchUnreadyInstances(t *testing.T, ns, cluster string, instances int) (stop func() int) {
	ctx, cancel := context.WithCancel(context.Background())
	result := make(chan int)
	go func() {
		most := 0
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				result <- most
				return
			case <-tick.C:
			}
			if up, err := instancesUp(ctx, ns, cluster); err == nil {
				most = max(most, instances-up)
			}
		}
	}()
	var once sync.Once
	var most int
	stop = func() int {
		once.Do(func() {
			cancel()
			most = <-result
		})
		return most
	}
	t.Cleanup(func() { stop() })
	return stop
}

// instancesUp counts the cluster's pods that are not terminating and are
// Ready, or that status reports ready: the operator may go on as soon as its
// own report says an instance is back, a probe period before the kubelet
// marks the pod Ready, and that must not count as two instances down.
func instancesUp(ctx context.Context, ns, cluster string) (int, error) {
	pods, err := clusterPods(ctx, ns, cluster)
	if err != nil {
		return 0, err
	}
	pgc, err := getCluster(ctx, ns, cluster)
	if err != nil {
		return 0, err
	}
	reportedReady := map[string]bool{}
	for _, in := range pgc.Status.Instances {
		reportedReady[in.Name] = in.Ready
	}
	up := 0
	for i := range pods {
		if pods[i].DeletionTimestamp == nil && (podIsReady(&pods[i]) || reportedReady[pods[i].Name]) {
			up++
		}
	}
	return up, nil
}

// maxWriteGap bounds the longest pause in committed writes while the
// instances restart one by one: the primary's restart is a switchover,
// seconds of unavailability; a minute means something waited for a timeout.
const maxWriteGap = time.Minute

// checkWritesResume checks that the writer's rows keep coming through -rw
// after the rollout and reports the longest gap between committed rows.
func checkWritesResume(t *testing.T, ns, cluster string) {
	t.Helper()
	after, err := countRows(context.Background(), ns, cluster+"-rw", "ticks")
	if err != nil {
		t.Fatal(err)
	}
	eventuallyEvery(t, time.Minute, time.Second, "the writer's rows after the rollout", func(ctx context.Context) (bool, error) {
		n, err := countRows(ctx, ns, cluster+"-rw", "ticks")
		return n > after+5, err
	})
	out := psql(t, ns, cluster+"-rw", `SELECT coalesce(extract(epoch FROM max(gap)), 0)
		FROM (SELECT at - lag(at) OVER (ORDER BY at) AS gap FROM ticks) g`)
	seconds, err := strconv.ParseFloat(out, 64)
	if err != nil {
		t.Fatalf("longest gap between writes: %q", out)
	}
	ok, failed := writerAttempts(t, ns, "writer")
	t.Logf("longest gap between committed writes (one every 200ms) during the rolling restart: %.1fs; "+
		"%d writes succeeded, %d failed", seconds, ok, failed)
	if gap := time.Duration(seconds * float64(time.Second)); gap > maxWriteGap {
		t.Fatalf("writes stopped for %s during the rolling restart, want at most %s", gap, maxWriteGap)
	}
}

// TestOperatorRestartChangesNothing: restarting the operator restarts no
// PostgreSQL pod and rewrites none of the cluster's objects; the cluster
// stays Ready throughout, and the new operator takes it over.
func TestOperatorRestartChangesNothing(t *testing.T) {
	serial(t, stopsTheOperator)
	ns := newNamespace(t)
	const name = "steady"
	createCluster(t, newCluster(ns, name, 2), "")
	waitReadyCondition(t, ns, name)
	waitHealthy(t, ns, name, 2, time.Minute)
	pods := mustSnapshotPods(t, ns, name)
	objects := mustFingerprintObjects(t, ns, name)

	restartOperator(t)
	consistently(t, 30*time.Second, time.Second, "the cluster staying Ready on the same pods", func(ctx context.Context) error {
		pgc, err := getCluster(ctx, ns, name)
		if err != nil {
			return err
		}
		if err := clusterSettled(pgc, 2); err != nil {
			return err
		}
		return samePods(ctx, ns, name, pods)
	})
	// Starting up is not enough: a reloadable change applied proves the new
	// operator has taken this cluster over, and must still restart nothing.
	setParameters(t, ns, name, map[string]string{"work_mem": "5MB"})
	waitSameOnEveryInstance(t, ns, name, "SHOW work_mem", "5MB", 2*time.Minute)
	waitHealthy(t, ns, name, 2, clusterChangeTimeout)
	if err := samePods(context.Background(), ns, name, pods); err != nil {
		t.Fatalf("after an operator restart: %v", err)
	}
	if now := mustFingerprintObjects(t, ns, name); !maps.Equal(now, objects) {
		t.Fatalf("an operator restart changed the cluster's objects:\nbefore %v\nafter  %v", objects, now)
	}
}

// TestBadImageHaltsRollout: an image that cannot start stops the rollout at
// its first replica, status says so, the primary and another replica keep
// serving, and the previous image brings the cluster back to Ready.
func TestBadImageHaltsRollout(t *testing.T) {
	parallel(t)
	ns := newNamespace(t)
	const name = "badimg"
	// The same major version as testImage, so validation allows the change;
	// no such image exists, and there is no registry to pull it from.
	const badImage = "tusk/postgres:15-missing"
	createCluster(t, newCluster(ns, name, 3), "")
	waitReadyCondition(t, ns, name)
	waitHealthy(t, ns, name, 3, time.Minute)
	startSQLClient(t, ns, name)
	psql(t, ns, name+"-rw", "CREATE TABLE marks (id int PRIMARY KEY); INSERT INTO marks VALUES (1)")
	primary := mustGetCluster(t, ns, name).Status.CurrentPrimary

	patchClusterSpec(t, ns, name, map[string]any{"image": badImage})
	halted := waitRolloutHalted(t, ns, name, badImage)
	if halted == primary {
		t.Fatalf("the rollout began with the primary %s, want a replica first", primary)
	}
	consistently(t, 30*time.Second, 2*time.Second, "the rollout staying halted at "+halted, func(ctx context.Context) error {
		return rolloutHaltedAt(ctx, ns, name, halted, primary)
	})
	psql(t, ns, name+"-rw", "INSERT INTO marks VALUES (2)")
	checkServingBesides(t, ns, name, halted, "2")

	start := time.Now()
	patchClusterSpec(t, ns, name, map[string]any{"image": testImage})
	waitHealthy(t, ns, name, 3, clusterChangeTimeout)
	t.Logf("back to Healthy %.0fs after restoring the image", time.Since(start).Seconds())
	for _, p := range mustClusterPods(t, ns, name) {
		if img := containerImage(&p); img != testImage {
			t.Fatalf("pod %s runs %q after the image was set back to %s", p.Name, img, testImage)
		}
	}
	psql(t, ns, name+"-rw", "INSERT INTO marks VALUES (3)")
	waitSameOnEveryInstance(t, ns, name, "SELECT count(*) FROM marks", "3", 2*time.Minute)
}

// waitRolloutHalted waits until exactly one pod runs image and the status
// reports the halt, and returns that pod's name.
func waitRolloutHalted(t *testing.T, ns, cluster, image string) string {
	t.Helper()
	var halted string
	eventuallyEvery(t, clusterChangeTimeout, time.Second, "the rollout of "+image+" to halt",
		func(ctx context.Context) (bool, error) {
			pods, err := clusterPods(ctx, ns, cluster)
			if err != nil {
				return false, err
			}
			var updated []string
			for i := range pods {
				if containerImage(&pods[i]) == image {
					updated = append(updated, pods[i].Name)
				}
			}
			if len(updated) != 1 {
				return false, fmt.Errorf("pods on %s: %v", image, updated)
			}
			halted = updated[0]
			pgc, err := getCluster(ctx, ns, cluster)
			if err != nil {
				return false, err
			}
			if c := haltCondition(pgc, halted); c == nil {
				return false, fmt.Errorf("no condition reports the halt at %s: %+v", halted, pgc.Status.Conditions)
			}
			return true, nil
		})
	return halted
}

// haltCondition is the condition that reports a rollout halted at
// instance: Progressing=False or Degraded=True, with a reason about the
// rollout or a message naming the instance.
func haltCondition(pgc *tuskv1alpha1.PostgresCluster, instance string) *metav1.Condition {
	for i := range pgc.Status.Conditions {
		c := &pgc.Status.Conditions[i]
		stuck := (c.Type == tuskv1alpha1.ConditionProgressing && c.Status == metav1.ConditionFalse) ||
			(c.Type == tuskv1alpha1.ConditionDegraded && c.Status == metav1.ConditionTrue)
		if stuck && (strings.Contains(c.Reason, "Rollout") || strings.Contains(c.Message, instance)) {
			return c
		}
	}
	return nil
}

// rolloutHaltedAt returns nil while no pod but halted has left the old
// image, and the primary has not changed.
func rolloutHaltedAt(ctx context.Context, ns, cluster, halted, primary string) error {
	pods, err := clusterPods(ctx, ns, cluster)
	if err != nil {
		return err
	}
	for i := range pods {
		if pods[i].Name != halted && containerImage(&pods[i]) != testImage {
			return fmt.Errorf("pod %s moved on to %q", pods[i].Name, containerImage(&pods[i]))
		}
	}
	pgc, err := getCluster(ctx, ns, cluster)
	if err != nil {
		return err
	}
	if pgc.Status.CurrentPrimary != primary {
		return fmt.Errorf("the primary changed from %s to %s", primary, pgc.Status.CurrentPrimary)
	}
	return nil
}

// checkServingBesides checks that, with instance halted, the primary and
// at least one other replica are Ready and have the marks table's rows.
func checkServingBesides(t *testing.T, ns, cluster, halted, rows string) {
	t.Helper()
	pgc := mustGetCluster(t, ns, cluster)
	if pgc.Status.ReadyInstances < 2 {
		t.Fatalf("%d instances ready while the rollout is halted at %s, want the primary and a replica", pgc.Status.ReadyInstances, halted)
	}
	var serving []string
	for _, p := range mustClusterPods(t, ns, cluster) {
		if p.Name != halted && podIsReady(&p) {
			serving = append(serving, p.Name)
		}
	}
	if len(serving) < 2 || !slices.Contains(serving, pgc.Status.CurrentPrimary) {
		t.Fatalf("Ready pods besides %s: %v; want the primary %s and a replica", halted, serving, pgc.Status.CurrentPrimary)
	}
	for _, pod := range serving {
		eventuallyEvery(t, time.Minute, time.Second, pod+" to have "+rows+" rows", func(ctx context.Context) (bool, error) {
			out, err := tryInstanceSQL(ctx, ns, cluster, pod, "SELECT count(*) FROM marks")
			return out == rows, err
		})
	}
}

// TestDeleteCluster: deleting a cluster removes its pods, Services and
// Secrets; its volumes stay by default (reclaimPolicy Retain), and with
// them the superuser and owner Secrets, released from the cluster and
// marked as kept for its name; all go with reclaimPolicy Delete.
func TestDeleteCluster(t *testing.T) {
	parallel(t)
	ns := newNamespace(t)

	kept := createAndDeleteCluster(t, ns, "kept", "")
	for _, claim := range kept {
		c, err := clientset.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), claim, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("PVC %s of the deleted cluster (reclaimPolicy Retain by default): %v", claim, err)
		}
		if c.DeletionTimestamp != nil || len(c.OwnerReferences) > 0 {
			t.Fatalf("PVC %s is being deleted or still owned (%+v): the garbage collector would remove it", claim, c.OwnerReferences)
		}
	}
	for _, name := range []string{"kept-superuser", "kept-app"} {
		s, err := clientset.CoreV1().Secrets(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("Secret %s of the deleted cluster (kept with the volumes): %v", name, err)
		}
		if len(s.OwnerReferences) > 0 || s.Annotations["tusk.dev/kept-for"] != "kept" {
			t.Fatalf("Secret %s: owners %v, annotations %v; want it released and marked kept for kept", name, s.OwnerReferences, s.Annotations)
		}
	}

	for _, claim := range createAndDeleteCluster(t, ns, "dropped", "Delete") {
		waitClaimGone(t, ns, claim, "")
	}
}

// createAndDeleteCluster creates a two-instance cluster, deletes it once it
// is Healthy, waits for its pods, Services and Secrets to be gone, and
// returns the names of the PVCs it had.
func createAndDeleteCluster(t *testing.T, ns, name, reclaimPolicy string) []string {
	t.Helper()
	createCluster(t, newCluster(ns, name, 2), reclaimPolicy)
	waitReadyCondition(t, ns, name)
	waitHealthy(t, ns, name, 2, time.Minute)
	claims := podNames(mustClusterPods(t, ns, name))
	deleteCluster(t, ns, name)
	waitClusterObjectsGone(t, ns, name, reclaimPolicy != "Delete")
	return claims
}

// waitClusterObjectsGone waits until the cluster's pods, Services and
// Secrets, and its keys in the operator's namespace, are deleted; with keptSecrets, the superuser and owner Secrets
// are kept with the volumes, and not waited for.
func waitClusterObjectsGone(t *testing.T, ns, cluster string, keptSecrets bool) {
	t.Helper()
	eventuallyEvery(t, 3*time.Minute, time.Second, "the objects of "+cluster+" deleted", func(ctx context.Context) (bool, error) {
		pods, err := clusterPods(ctx, ns, cluster)
		if err != nil || len(pods) > 0 {
			return false, err
		}
		for _, suffix := range []string{"-rw", "-ro", "-r"} {
			_, err := clientset.CoreV1().Services(ns).Get(ctx, cluster+suffix, metav1.GetOptions{})
			if err := notFound("Service "+cluster+suffix, err); err != nil {
				return false, err
			}
		}
		for _, suffix := range []string{"-superuser", "-app", "-ca", "-server"} {
			if keptSecrets && (suffix == "-superuser" || suffix == "-app") {
				continue
			}
			_, err := clientset.CoreV1().Secrets(ns).Get(ctx, cluster+suffix, metav1.GetOptions{})
			if err := notFound("Secret "+cluster+suffix, err); err != nil {
				return false, err
			}
		}
		// The cluster's keys, in the operator's namespace, go with it.
		keys := ns + "." + cluster + ".keys"
		_, err = clientset.CoreV1().Secrets(operatorNamespace).Get(ctx, keys, metav1.GetOptions{})
		if err := notFound("Secret "+operatorNamespace+"/"+keys, err); err != nil {
			return false, err
		}
		return true, nil
	})
}

// notFound turns the error of getting object into nil when it is not
// found, and into an error saying so when it still exists.
func notFound(object string, err error) error {
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err == nil:
		return fmt.Errorf("%s still exists", object)
	default:
		return fmt.Errorf("reading %s: %w", object, err)
	}
}
