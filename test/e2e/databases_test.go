//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/plugin"
)

// sqlApplyTimeout bounds how long an object takes to be applied once its
// cluster is ready: a refused one is retried every 30 s.
const sqlApplyTimeout = 3 * time.Minute

// TestDeclarativeDatabases applies docs/databases.md's examples verbatim:
// on the cluster shop an application role with its password Secret, a
// replication role, a database with an extension and a schema, and a
// publication; on the cluster reports a database and a subscription to
// shop's publication. It checks each takes effect: the role logs in with
// its settings, the password rotates with the Secret, rows replicate; a
// switchover of the subscriber while rows are written loses none and
// duplicates none, and the objects are applied on the new primary;
// deleting the subscription drops its slot on the publisher.
func TestDeclarativeDatabases(t *testing.T) {
	parallel(t)
	ns := newNamespace(t)
	shop := newCluster(ns, "shop", 1)
	shop.Spec.PostgreSQL.Synchronous = tuskv1alpha1.SynchronousSpec{}
	createCluster(t, shop, "")
	// A subscriber runs PostgreSQL 16 or later (docs/databases.md): before,
	// its subscriptions apply rows as a superuser.
	reports := newCluster(ns, "reports", 2)
	reports.Spec.Image = "tusk/postgres:17"
	createCluster(t, reports, "")
	waitReadyCondition(t, ns, "shop")
	waitReadyCondition(t, ns, "reports")
	blocks := docYAMLBlocks(t, "databases.md", 3)

	applyYAML(t, ns, blocks[0])
	for _, o := range []string{"pgrole/shop-app-user", "pgrole/shop-replicator", "pgrole/shop-reporter", "pgdb/shop-orders"} {
		waitApplied(t, ns, o)
	}
	startSQLClient(t, ns, "shop")
	app := roleLogin{user: "app_user", password: "change-me-app", database: "orders"}
	if got := app.psql(t, ns, "SELECT current_user, current_setting('statement_timeout')"); got != "app_user|30s" {
		t.Errorf("app_user's session: %q, want app_user|30s (its role setting)", got)
	}
	if got := app.psql(t, ns, "SELECT e.extname || ' ' || n.nspowner::regrole FROM pg_extension e, pg_namespace n "+
		"WHERE e.extname = 'pgcrypto' AND n.nspname = 'sales'"); got != "pgcrypto app_user" {
		t.Errorf("extension and schema: %q, want pgcrypto and the schema sales owned by app_user", got)
	}
	// The application makes its tables; the publication, refused until
	// the table exists, is applied on its next try.
	app.psql(t, ns, "CREATE TABLE sales.orders (id bigint PRIMARY KEY, note text NOT NULL)")
	waitApplied(t, ns, "pgpub/shop-orders")
	rotateRolePassword(t, ns, &app)
	checkCertificateLogin(t, ns)
	if got := tuskPSQL(t, ns, "shop", "--role", "app_user", "--secret", "shop-app-user", "--database", "orders", "--",
		"-XAt", "-c", "SELECT current_user || ' ' || count(*) FROM sales.orders"); got != "app_user 0" {
		t.Errorf("kubectl tusk psql as app_user printed %q, want app_user 0", got)
	}

	applyYAML(t, ns, blocks[1])
	waitApplied(t, ns, "pgdb/reports-orders")
	instanceSQLIn(t, ns, "reports", currentPrimary(t, ns, "reports"), "orders",
		"CREATE TABLE sales.orders (id bigint PRIMARY KEY, note text NOT NULL); ALTER TABLE sales.orders OWNER TO app")
	app.psql(t, ns, "INSERT INTO sales.orders SELECT g, 'before' FROM generate_series(1, 100) g")
	applyYAML(t, ns, blocks[2])
	waitApplied(t, ns, "pgsub/reports-orders")
	waitReplicated(t, ns, app)

	// A switchover of the subscriber while the publisher takes rows.
	stop := insertOrdersUntilStopped(t, ns, app)
	time.Sleep(2 * time.Second) // rows in flight while the primary changes
	to := firstReplica(t, ns, "reports")
	promote(t, ns, "reports", to)
	time.Sleep(2 * time.Second)
	inserted := stop()
	t.Logf("inserted %d batches of rows while the subscriber switched over to %s", inserted, to)
	waitReplicated(t, ns, app)
	for _, o := range []string{"pgdb/reports-orders", "pgsub/reports-orders"} {
		waitConditionMessage(t, ns, o, tuskv1alpha1.ConditionApplied, to)
	}
	waitConditionStatus(t, ns, "pgsub/reports-orders", tuskv1alpha1.ConditionSlotLagging, metav1.ConditionFalse)
	if got := tuskPSQL(t, ns, "reports", "--replica", "--database", "orders", "--", "-XAt", "-c",
		"SELECT pg_is_in_recovery() || ' ' || (SELECT count(*) > 100 FROM sales.orders)"); got != "true true" {
		t.Errorf("kubectl tusk psql --replica printed %q, want a replica with the replicated rows", got)
	}

	// Deleting the subscription drops its slot on the publisher.
	if out, err := kubectl(context.Background(), "delete", "-n", ns, "pgsub/reports-orders", "--timeout=2m"); err != nil {
		t.Fatalf("deleting the subscription: %v\n%s", err, out)
	}
	if got := instanceSQLIn(t, ns, "shop", currentPrimary(t, ns, "shop"), "orders",
		"SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'orders_from_shop'"); got != "0" {
		t.Errorf("the publisher still has %s slot(s) orders_from_shop after the subscription was deleted", got)
	}
}

// checkCertificateLogin logs in as reporter with its client certificate,
// from a pod that mounts the role's Secret as docs/databases.md says.
func checkCertificateLogin(t *testing.T, ns string) {
	t.Helper()
	pod := restrictedPod("reporter-client", "sleep", "infinity")
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "cert", VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: "shop-reporter-client-tls", DefaultMode: ptrTo[int32](0o640)},
	}})
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "cert", MountPath: "/etc/reporter", ReadOnly: true})
	createPod(t, ns, pod)
	waitPodReady(t, ns, pod.Name, 2*time.Minute)
	conninfo := "host=shop-rw." + ns + ".svc port=5432 user=reporter dbname=orders sslmode=verify-full " +
		"sslrootcert=/etc/reporter/ca.crt sslcert=/etc/reporter/tls.crt sslkey=/etc/reporter/tls.key"
	ctx, cancel := context.WithTimeout(context.Background(), sqlTimeout)
	defer cancel()
	out, err := kubectl(ctx, "exec", "-n", ns, pod.Name, "--", "psql", conninfo, "-XAtq", "-c", "SELECT current_user, count(*) FROM sales.orders")
	if err != nil || strings.TrimSpace(out) != "reporter|0" {
		t.Errorf("reporter's certificate login: %q, %v; want reporter|0", out, err)
	}
}

// tuskPSQL runs `kubectl tusk psql CLUSTER ARGS...` (the plugin's own
// command, in process, without a terminal) and returns what it printed.
func tuskPSQL(t *testing.T, ns, cluster string, args ...string) string {
	t.Helper()
	ctrllog.SetLogger(logr.Discard())
	var out, errOut bytes.Buffer
	cmd := plugin.NewCommand(plugin.BinaryName, genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut})
	cmd.SetArgs(append([]string{"psql", cluster, "-n", ns}, args...))
	ctx, cancel := context.WithTimeout(context.Background(), sqlTimeout)
	defer cancel()
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("kubectl tusk psql %s %v: %v\n%s%s", cluster, args, err, out.String(), errOut.String())
	}
	return strings.TrimSpace(out.String())
}

// docYAMLBlocks returns the ```yaml blocks of docs/<name>, in order, and
// fails unless there are want of them.
func docYAMLBlocks(t *testing.T, name string, want int) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", name))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(data), -1) {
		blocks = append(blocks, m[1])
	}
	if len(blocks) != want {
		t.Fatalf("docs/%s has %d yaml blocks, want %d", name, len(blocks), want)
	}
	return blocks
}

// applyYAML applies manifests in ns with kubectl, as a user would.
func applyYAML(t *testing.T, ns, manifests string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "manifests.yaml")
	if err := os.WriteFile(file, []byte(manifests), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl(context.Background(), "apply", "-n", ns, "-f", file); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
}

// waitApplied waits until the object's Applied condition is True.
func waitApplied(t *testing.T, ns, object string) {
	t.Helper()
	waitConditionStatus(t, ns, object, tuskv1alpha1.ConditionApplied, metav1.ConditionTrue)
}

func waitConditionStatus(t *testing.T, ns, object, condition string, status metav1.ConditionStatus) {
	t.Helper()
	waitConditionMessage(t, ns, object, condition, "", status)
}

// waitConditionMessage waits until the object's condition has the status
// (True when not given) and a message containing message.
func waitConditionMessage(t *testing.T, ns, object, condition, message string, status ...metav1.ConditionStatus) {
	t.Helper()
	want := metav1.ConditionTrue
	if len(status) > 0 {
		want = status[0]
	}
	jsonpath := fmt.Sprintf(`{.status.conditions[?(@.type=="%s")].status}|{.status.conditions[?(@.type=="%s")].message}`, condition, condition)
	eventuallyEvery(t, sqlApplyTimeout, time.Second, fmt.Sprintf("%s %s=%s %q", object, condition, want, message), func(ctx context.Context) (bool, error) {
		out, err := kubectl(ctx, "get", "-n", ns, object, "-o", "jsonpath="+jsonpath)
		if err != nil {
			return false, err
		}
		got, msg, _ := strings.Cut(out, "|")
		if got != string(want) || !strings.Contains(msg, message) {
			return false, fmt.Errorf("%s is %q: %s", condition, got, msg)
		}
		return true, nil
	})
}

// roleLogin is a managed role's login to one database of the publisher
// shop, through its read-write Service.
type roleLogin struct{ user, password, database string }

func (l roleLogin) conninfo(ns string) string {
	return fmt.Sprintf("%s user=%s password='%s' dbname=%s", serviceConninfo(ns, "shop-rw"), l.user, l.password, l.database)
}

func (l roleLogin) tryPSQL(ctx context.Context, ns, sql string) (string, error) {
	return tryPSQLConninfo(ctx, ns, l.conninfo(ns), sql)
}

func (l roleLogin) psql(t *testing.T, ns, sql string) string {
	t.Helper()
	out, err := l.tryPSQL(context.Background(), ns, sql)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// rotateRolePassword changes the role's password Secret and waits until
// the new password logs in and the old one no longer does.
func rotateRolePassword(t *testing.T, ns string, l *roleLogin) {
	t.Helper()
	old := *l
	l.password = "rotated-" + l.password
	patch := fmt.Sprintf(`{"stringData":{"password":%q}}`, l.password)
	if out, err := kubectl(context.Background(), "patch", "-n", ns, "secret/shop-app-user", "--type=merge", "-p", patch); err != nil {
		t.Fatalf("patching the password Secret: %v\n%s", err, out)
	}
	eventuallyEvery(t, sqlApplyTimeout, time.Second, "the new password to log in", func(ctx context.Context) (bool, error) {
		_, err := l.tryPSQL(ctx, ns, "SELECT 1")
		return err == nil, err
	})
	if _, err := old.tryPSQL(context.Background(), ns, "SELECT 1"); err == nil {
		t.Error("the old password still logs in after the rotation")
	}
}

// instanceSQLIn runs sql as the superuser in database on one instance.
func instanceSQLIn(t *testing.T, ns, cluster, pod, database, sql string) string {
	t.Helper()
	superuser, err := clientset.CoreV1().Secrets(ns).Get(context.Background(), cluster+"-superuser", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), sqlTimeout)
	defer cancel()
	out, err := kubectl(ctx, "exec", "-n", ns, pod, "-c", "postgres", "--",
		"env", "PGPASSWORD="+string(superuser.Data["password"]),
		"psql", "-h", "/run/tusk/socket", "-U", string(superuser.Data["username"]), "-d", database,
		"-XAtq", "-v", "ON_ERROR_STOP=1", "-c", sql)
	if err != nil {
		t.Fatalf("psql in %s/%s -c %q: %v\n%s", pod, database, sql, err, out)
	}
	return strings.TrimSpace(out)
}

// ordersDigest identifies a set of rows: their count and the sum of their
// keys. With a primary key, equal digests mean no row missing and none
// twice.
const ordersDigest = "SELECT count(*) || '/' || coalesce(sum(id), 0) FROM sales.orders"

// waitReplicated waits until the subscriber's rows are the publisher's.
func waitReplicated(t *testing.T, ns string, app roleLogin) {
	t.Helper()
	want := app.psql(t, ns, ordersDigest)
	eventuallyEvery(t, sqlApplyTimeout, time.Second, "the subscriber to have the publisher's rows "+want, func(ctx context.Context) (bool, error) {
		got := instanceSQLIn(t, ns, "reports", currentPrimary(t, ns, "reports"), "orders", ordersDigest)
		if got != want {
			return false, fmt.Errorf("the subscriber has %s", got)
		}
		return true, nil
	})
}

// insertOrdersUntilStopped inserts batches of ten rows on the publisher,
// one statement at a time, until the returned function is called; it
// returns how many batches were inserted.
func insertOrdersUntilStopped(t *testing.T, ns string, app roleLogin) func() int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	batches := 0
	var failure error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for next := 1000; ctx.Err() == nil; next += 10 {
			sql := fmt.Sprintf("INSERT INTO sales.orders SELECT g, 'during' FROM generate_series(%d, %d) g", next, next+9)
			if _, err := app.tryPSQL(context.Background(), ns, sql); err != nil {
				failure = err
				return
			}
			batches++
		}
	}()
	return func() int {
		cancel()
		wg.Wait()
		if failure != nil {
			t.Fatalf("inserting on the publisher: %v", failure)
		}
		return batches
	}
}
