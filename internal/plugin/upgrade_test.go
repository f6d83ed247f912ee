package plugin

import (
	"bytes"
	"strings"
	"testing"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// logicalSource is a healthy cluster ready for a logical upgrade, with a
// PostgresDatabase of its own beside the application database.
func logicalSource() (*tuskv1alpha1.PostgresCluster, []tuskv1alpha1.PostgresDatabase) {
	c := healthyCluster()
	c.Spec.Image = "tusk/postgres:15"
	c.Spec.PostgreSQL.Parameters = map[string]tuskv1alpha1.ParameterValue{"wal_level": "logical", "work_mem": "8MB"}
	c.Spec.Backup = &tuskv1alpha1.BackupSpec{}
	db := func(cluster, name, owner string, ensure tuskv1alpha1.Ensure) tuskv1alpha1.PostgresDatabase {
		d := tuskv1alpha1.PostgresDatabase{}
		d.Spec.Cluster.Name, d.Spec.Name, d.Spec.Owner, d.Spec.Ensure = cluster, name, owner, ensure
		return d
	}
	return c, []tuskv1alpha1.PostgresDatabase{
		db("orders", "billing_eu", "billing", tuskv1alpha1.EnsurePresent),
		db("orders", "gone", "x", tuskv1alpha1.EnsureAbsent),
		db("other", "elsewhere", "y", tuskv1alpha1.EnsurePresent),
	}
}

// TestLogicalUpgradeObjectsGolden: the Secret, role, publications and new
// cluster kubectl tusk upgrade --logical creates: the application
// database and the cluster's present PostgresDatabases, their owners as
// the role's groups, the new cluster's spec the old one's but for image,
// bootstrap and backups.
func TestLogicalUpgradeObjectsGolden(t *testing.T) {
	c, dbs := logicalSource()
	objs, err := logicalUpgradeObjects(c, dbs, "tusk/postgres:18", "", nil, "not-a-real-password",
		map[string][]byte{"username": []byte("app"), "password": []byte("not-the-app-password")})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := printYAML(&buf, objs); err != nil {
		t.Fatal(err)
	}
	golden(t, "upgrade-logical", buf.Bytes())
}

// TestLogicalUpgradeRefusals: no wal_level logical, or a tag with no
// major and no --name, is refused with what to do.
func TestLogicalUpgradeRefusals(t *testing.T) {
	c, dbs := logicalSource()
	if _, err := logicalUpgradeObjects(c, dbs, "tusk/postgres:latest", "", nil, "pw", nil); err == nil || !strings.Contains(err.Error(), "--name") {
		t.Errorf("an image without a major in its tag: %v, want a request for --name", err)
	}
	objs, err := logicalUpgradeObjects(c, dbs, "tusk/postgres:latest", "orders-next", []string{"app"}, "pw", nil)
	if err != nil || objs[len(objs)-1].GetName() != "orders-next" || len(objs) != 5 {
		t.Errorf("--name orders-next --databases app: %d objects, %v", len(objs), err)
	}
	delete(c.Spec.PostgreSQL.Parameters, "wal_level")
	if err := logicalSourceReady(c); err == nil || !strings.Contains(err.Error(), "wal_level: logical") {
		t.Errorf("without wal_level logical: %v, want the setting named", err)
	}
}

// TestPreUpgradeRestore: the way back is a cluster of the old image from
// the backup taken before the upgrade; without one, a clear refusal.
func TestPreUpgradeRestore(t *testing.T) {
	c := upgradedCluster()
	got, err := preUpgradeRestore(c, "orders-15")
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Image != "postgres:15" || got.Spec.Bootstrap.Recovery.Backup.Name != "orders-pre-upgrade-17" || got.Spec.Backup != nil || got.Name != "orders-15" {
		t.Errorf("restore cluster %s: image %s, bootstrap %+v, backup %+v", got.Name, got.Spec.Image, got.Spec.Bootstrap.Recovery, got.Spec.Backup)
	}
	c.Status.MajorUpgrade.Backup = ""
	if _, err := preUpgradeRestore(c, "orders-15"); err == nil || !strings.Contains(err.Error(), "no backup from before") {
		t.Errorf("without a backup: %v", err)
	}
}
