//go:build e2e

package e2e

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/pki"
)

// legacyServer runs a plain PostgreSQL 15 server, as one outside Tusk: its
// superuser logs in over TLS with a password; the certificate names its
// Service.
const legacyServer = `set -e
D=/var/lib/postgresql/data/pgdata
initdb -D "$D" -U postgres --pwfile=/etc/legacy/password --auth-local=peer --auth-host=scram-sha-256 >/dev/null
echo "hostssl all all all scram-sha-256" >> "$D/pg_hba.conf"
exec postgres -D "$D" -c listen_addresses='*' -c unix_socket_directories=/tmp -c ssl=on -c ssl_cert_file=/etc/legacy-tls/tls.crt -c ssl_key_file=/etc/legacy-tls/tls.key`

// legacyData is what the legacy server holds: two databases, roles with
// a group and a setting, a sequence, a view, an extension.
const legacyData = `CREATE ROLE readers NOLOGIN;
CREATE ROLE shop LOGIN PASSWORD 'shop-secret' IN ROLE readers;
ALTER ROLE shop SET statement_timeout = '30s';
CREATE DATABASE shop OWNER shop;
CREATE DATABASE billing OWNER postgres;
\c shop
CREATE EXTENSION pgcrypto;
SET ROLE shop;
CREATE TABLE orders (id bigserial PRIMARY KEY, note text NOT NULL, digest text);
INSERT INTO orders (note, digest) SELECT 'order ' || g, encode(digest('order ' || g, 'sha256'), 'hex') FROM generate_series(1, 5000) g;
CREATE VIEW big_orders AS SELECT * FROM orders WHERE id > 4990;
GRANT SELECT ON big_orders TO readers;
\c billing
CREATE TABLE invoices (id int PRIMARY KEY, amount numeric NOT NULL);
INSERT INTO invoices SELECT g, g * 1.5 FROM generate_series(1, 300) g;`

// startLegacyServer runs the legacy server in ns behind the Service
// "legacy", with a CA of its own, and returns that CA's certificate.
func startLegacyServer(t *testing.T, ns, password string) []byte {
	t.Helper()
	now := time.Now()
	ca, err := pki.NewCA("legacy CA", 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	host := "legacy." + ns + ".svc"
	server, err := pki.IssueServer(ca, host, []string{host, host + ".cluster.local"}, []net.IP{net.IPv4(127, 0, 0, 1)}, 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	createSecret(t, ns, "legacy-tls", map[string][]byte{"tls.crt": server.CertPEM, "tls.key": server.KeyPEM})
	createSecret(t, ns, "legacy-password", map[string][]byte{"password": []byte(password)})
	pod := restrictedPod("legacy", "sh", "-c", legacyServer)
	pod.Spec.Volumes = []corev1.Volume{
		{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		// PostgreSQL takes a key owned by root when only its group may
		// read it: fsGroup makes the pod's user a member.
		{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "legacy-tls", DefaultMode: ptrTo[int32](0o440)}}},
		{Name: "password", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "legacy-password", DefaultMode: ptrTo[int32](0o440)}}},
	}
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = []corev1.VolumeMount{
		{Name: "data", MountPath: "/var/lib/postgresql/data"},
		{Name: "tls", MountPath: "/etc/legacy-tls", ReadOnly: true},
		{Name: "password", MountPath: "/etc/legacy", ReadOnly: true},
	}
	c.Ports = []corev1.ContainerPort{{Name: "postgres", ContainerPort: 5432}}
	c.ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"pg_isready", "-h", "127.0.0.1"}}},
		PeriodSeconds: 1,
	}
	createPod(t, ns, pod)
	if _, err := clientset.CoreV1().Services(ns).Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "legacy"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "legacy"},
			Ports: []corev1.ServicePort{{Name: "postgres", Port: 5432, TargetPort: intstr.FromString("postgres")}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the legacy Service: %v", err)
	}
	waitPodReady(t, ns, "legacy", 2*time.Minute)
	return ca.CertPEM
}

// legacySQL runs a psql script on the legacy server as its superuser.
func legacySQL(t *testing.T, ns, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := kubectl(ctx, "exec", "-n", ns, "legacy", "--", "psql", "-h", "/tmp", "-U", "postgres",
		"-XAtq", "-v", "ON_ERROR_STOP=1", "-c", script)
	if err != nil {
		t.Fatalf("psql on the legacy server: %v\n%s", err, out)
	}
	return strings.TrimSpace(out)
}

// TestImportFromAnotherNamespace: a PostgreSQL 15 server outside Tusk, in
// another namespace, is imported into a new 2-instance PostgreSQL 17
// cluster over verified TLS: every row, the sequences, views, extension,
// roles with their passwords (the import logs in as the source's
// superuser), memberships and settings; the replica clones the imported
// primary; the source's role logs in through the cluster's Service with
// its old password.
func TestImportFromAnotherNamespace(t *testing.T) {
	parallel(t)
	legacyNS, ns := newNamespace(t), newNamespace(t)
	caPEM := startLegacyServer(t, legacyNS, "legacy-superuser-pw")
	legacySQL(t, legacyNS, "SELECT 1") // peer login works before the script's \c
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := kubectl(ctx, "exec", "-n", legacyNS, "legacy", "--", "sh", "-c",
		"cat > /tmp/data.sql <<'EOF'\n"+legacyData+"\nEOF\npsql -h /tmp -U postgres -Xq -v ON_ERROR_STOP=1 -f /tmp/data.sql"); err != nil {
		t.Fatalf("loading the legacy data: %v\n%s", err, out)
	}

	createSecret(t, ns, "legacy-login", map[string][]byte{"password": []byte("legacy-superuser-pw")})
	createSecret(t, ns, "legacy-ca", map[string][]byte{"ca.crt": caPEM})
	const name = "imported"
	pgc := newCluster(ns, name, 2)
	pgc.Spec.Image = "tusk/postgres:17"
	pgc.Spec.Bootstrap = &tuskv1alpha1.BootstrapSpec{InitDB: &tuskv1alpha1.InitDBSpec{Import: &tuskv1alpha1.ImportSpec{
		Source: tuskv1alpha1.ImportSource{
			Host: "legacy." + legacyNS + ".svc", User: "postgres",
			PasswordSecret: corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "legacy-login"}, Key: "password"},
			CASecret:       &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "legacy-ca"}, Key: "ca.crt"},
		},
		Databases: []string{"shop", "billing"},
	}}}
	start := time.Now()
	createCluster(t, pgc, "")
	waitHealthy(t, ns, name, 2, 5*time.Minute)
	t.Logf("imported and Healthy with 2 instances %.1fs after create", time.Since(start).Seconds())

	primary := mustGetCluster(t, ns, name).Status.CurrentPrimary
	for _, c := range []struct{ db, sql, want string }{
		{"shop", "SELECT count(*), max(id), sum(length(digest)) FROM orders", "5000|5000|320000"},
		{"shop", "SELECT nextval('orders_id_seq')", "5001"},
		{"shop", "SELECT count(*) FROM big_orders", "10"},
		{"shop", "SELECT extversion IS NOT NULL FROM pg_extension WHERE extname = 'pgcrypto'", "t"},
		{"billing", "SELECT count(*), sum(amount) FROM invoices", "300|67725.0"},
		{"app", "SELECT string_agg(datname || ':' || pg_get_userbyid(datdba), ',' ORDER BY datname) FROM pg_database WHERE datname IN ('shop', 'billing')", "billing:app,shop:shop"}, // the source superuser's database goes to the application owner
		{"app", "SELECT pg_has_role('shop', 'readers', 'MEMBER')", "t"},
		{"app", "SELECT array_to_string(setconfig, ',') FROM pg_db_role_setting WHERE setrole = 'shop'::regrole", "statement_timeout=30s"},
	} {
		got, err := tryInstanceSQLIn(context.Background(), ns, name, primary, c.db, c.sql)
		if err != nil || got != c.want {
			t.Errorf("on %s in %s: %q = %q (%v), want %q", primary, c.db, c.sql, got, err, c.want)
		}
	}
	// The replica was copied from the imported primary.
	waitSameOnEveryInstance(t, ns, name, "SELECT count(*) FROM pg_roles WHERE rolname IN ('shop', 'readers')", "2", time.Minute)

	// The source's password verifier came along: shop logs in through
	// the cluster's Service over verified TLS with its old password.
	startSQLClient(t, ns, name)
	out, err := tryPSQLConninfo(context.Background(), ns, serviceConninfo(ns, name+"-rw")+" user=shop password=shop-secret dbname=shop",
		"SELECT current_user, count(*) FROM big_orders")
	if err != nil || out != "shop|10" {
		t.Errorf("shop through %s-rw: %q, %v; want shop|10", name, out, err)
	}
	checkImportedCondition(t, ns, name)
}

// checkImportedCondition: once imported, the cluster says nothing more of
// the import, and its source's Secrets are no longer what it waits for.
func checkImportedCondition(t *testing.T, ns, name string) {
	t.Helper()
	pgc := mustGetCluster(t, ns, name)
	for _, c := range pgc.Status.Conditions {
		if strings.Contains(c.Message, "Importing") || c.Reason == tuskv1alpha1.ReasonImportSourceInvalid {
			t.Errorf("condition %s (%s) still says %q after the import", c.Type, c.Reason, c.Message)
		}
	}
	if pgc.Status.Phase != tuskv1alpha1.ClusterPhaseHealthy {
		t.Errorf("phase %s, want Healthy", pgc.Status.Phase)
	}
}
