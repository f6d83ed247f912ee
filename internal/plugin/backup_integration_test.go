//go:build integration

package plugin

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// withBackupSpec is healthyCluster with an object store.
func withBackupSpec() *tuskv1alpha1.PostgresCluster {
	c := healthyCluster()
	c.Spec.Backup = &tuskv1alpha1.BackupSpec{ObjectStore: tuskv1alpha1.ObjectStoreSpec{
		Endpoint: "https://s3.example.com", Bucket: "backups",
		CredentialsSecret: tuskv1alpha1.S3CredentialsSecret{Name: "s3"},
	}}
	return c
}

func backupsIn(t *testing.T, ns string) []tuskv1alpha1.PostgresBackup {
	t.Helper()
	var list tuskv1alpha1.PostgresBackupList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func TestBackupCreatesAPostgresBackup(t *testing.T) {
	_, ns := newCluster(t, withBackupSpec)
	out, err := kubectlTusk(t, kubeconfig, "-n", ns, "backup", "orders")
	if err != nil {
		t.Fatal(err)
	}
	list := backupsIn(t, ns)
	if len(list) != 1 || !regexp.MustCompile(`^orders-\d{8}-\d{6}$`).MatchString(list[0].Name) ||
		list[0].Spec.Cluster.Name != "orders" || list[0].Spec.Target != "" {
		t.Fatalf("backups %+v: want one named orders-YYYYMMDD-HHMMSS of orders, with the cluster's target", list)
	}
	if !strings.Contains(out, "Created PostgresBackup "+list[0].Name+" of orders") {
		t.Errorf("printed %q", out)
	}

	if _, err := kubectlTusk(t, kubeconfig, "-n", ns, "backup", "orders", "--name", "before-upgrade", "--target", "primary"); err != nil {
		t.Fatal(err)
	}
	b := &tuskv1alpha1.PostgresBackup{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "before-upgrade"}, b); err != nil ||
		b.Spec.Target != tuskv1alpha1.BackupTargetPrimary {
		t.Errorf("before-upgrade: %v, target %q; want primary", err, b.Spec.Target)
	}
	if _, err := kubectlTusk(t, kubeconfig, "-n", ns, "backup", "orders", "--name", "before-upgrade"); err == nil ||
		!strings.Contains(err.Error(), "PostgresBackup before-upgrade already exists") {
		t.Errorf("the same name again: %v", err)
	}

	out, err = kubectlTusk(t, kubeconfig, "-n", ns, "backups", "orders")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "NAME") || !strings.Contains(out, "before-upgrade") || !strings.Contains(out, list[0].Name) {
		t.Errorf("backups printed:\n%s", out)
	}
}

func TestBackupRefusalsCreateNothing(t *testing.T) {
	_, ns := newCluster(t, healthyCluster) // no spec.backup
	for args, want := range map[string]string{
		"backup orders":                   "PostgresCluster orders has no spec.backup",
		"backup nothing":                  `PostgresCluster "nothing" not found`,
		"backup orders --target replica":  `unknown --target "replica"`,
		"backup orders --name Not_A_Name": "", // refused by the API server
	} {
		_, err := kubectlTusk(t, kubeconfig, append([]string{"-n", ns}, strings.Fields(args)...)...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %q", args, err, want)
		}
	}
	if list := backupsIn(t, ns); len(list) != 0 {
		t.Errorf("refusals created %d PostgresBackups", len(list))
	}
}

// TestBackupWaitFollowsIt plays the operator: the backup runs, then
// completes (the result is printed) or fails (the error says why).
func TestBackupWaitFollowsIt(t *testing.T) {
	_, ns := newCluster(t, withBackupSpec)
	done := playBackup(ns, "good", func(st *tuskv1alpha1.PostgresBackupStatus) {
		st.Phase, st.BeginLSN, st.EndLSN, st.Timeline, st.SizeBytes = tuskv1alpha1.BackupPhaseCompleted, "0/2000028", "0/3000100", 1, 4096
		st.Location = "s3://backups/orders/base/good/"
	})
	out, err := kubectlTusk(t, kubeconfig, "-n", ns, "backup", "orders", "--name", "good", "--wait")
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Backup good of orders completed.", "0/2000028 to 0/3000100, timeline 1", "s3://backups/orders/base/good/"} {
		if !strings.Contains(out, want) {
			t.Errorf("--wait printed no %q:\n%s", want, out)
		}
	}

	done = playBackup(ns, "bad", func(st *tuskv1alpha1.PostgresBackupStatus) {
		st.Phase, st.Error = tuskv1alpha1.BackupPhaseFailed, "WrongCredentials: access denied"
	})
	_, err = kubectlTusk(t, kubeconfig, "-n", ns, "backup", "orders", "--name", "bad", "--wait")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err == nil || !strings.Contains(err.Error(), "backup bad failed: WrongCredentials: access denied") {
		t.Errorf("--wait on a failed backup: %v", err)
	}
}

// playBackup waits for backup name, marks it Running on orders-2, and then
// ends it as end says (the plugin may or may not see it Running).
func playBackup(ns, name string, end func(st *tuskv1alpha1.PostgresBackupStatus)) chan error {
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		key := client.ObjectKey{Namespace: ns, Name: name}
		b := &tuskv1alpha1.PostgresBackup{}
		for env.Client.Get(ctx, key, b) != nil {
			if ctx.Err() != nil {
				done <- ctx.Err()
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		started := metav1.Now()
		b.Status = tuskv1alpha1.PostgresBackupStatus{Phase: tuskv1alpha1.BackupPhaseRunning, Instance: "orders-2", StartedAt: &started}
		if err := env.Client.Status().Update(ctx, b); err != nil {
			done <- err
			return
		}
		end(&b.Status)
		completed := metav1.Now()
		b.Status.CompletedAt = &completed
		done <- env.Client.Status().Update(ctx, b)
	}()
	return done
}
