//go:build integration

package controller

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/pki"
	"tusk.dev/tusk/internal/testenv"
)

// TestLogicalImportTakesOverServices: a cluster importing logically from
// the cluster pg of its namespace reaches pg-rw verified against pg's CA
// (the ConfigMap, not the Secret with the key); its server certificate
// comes from pg's CA, names pg's Services and survives pg's CA Secret,
// while its client certificates come from a CA of its own. Once it
// reports its cutover done, pg's Services select its instances (status
// servedBy, an Event); deleting it gives them back.
func TestLogicalImportTakesOverServices(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	old := newCluster(ns)
	create(t, old)
	clusterWhen(t, client.ObjectKeyFromObject(old), creating)
	oldCA := keysOf(t, old)
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "migrator"}, StringData: map[string]string{"password": "s3cret"}})

	next := newCluster(ns)
	next.Name = "next"
	next.Spec.Instances = 1
	next.Spec.Bootstrap = migratorImport(tuskv1alpha1.ImportSource{Cluster: "pg"}, importMethodLogical)
	create(t, next)
	key := client.ObjectKeyFromObject(next)
	nextCreating := func(c *tuskv1alpha1.PostgresCluster) error {
		if c.Status.ObservedGeneration != c.Generation || c.Status.Phase != tuskv1alpha1.ClusterPhaseCreating || c.Status.CurrentPrimary != "next-1" {
			return fmt.Errorf("status %+v, want next-1 being created", c.Status)
		}
		return nil
	}
	clusterWhen(t, key, nextCreating)

	pod := get(t, ns, "next-1", &corev1.Pod{})
	if got, want := flagValue(pod.Spec.Containers[0].Command, "--import-host"), "pg-rw."+ns+".svc"; got != want {
		t.Errorf("--import-host=%q, want %q", got, want)
	}
	if vol := findVolume(pod, "import-source-ca"); vol == nil || vol.ConfigMap == nil || vol.ConfigMap.Name != "pg-ca" {
		t.Errorf("the import's CA volume is %+v, want the ConfigMap pg-ca", vol)
	}

	own := keysOf(t, next)
	server := get(t, ns, "next-server", &corev1.Secret{})
	replication := get(t, ns, "next-replication", &corev1.Secret{})
	if string(own.Data[keyCACert]) != string(oldCA.Data[keyCACert]) || string(own.Data[keyCAKey]) != string(oldCA.Data[keyCAKey]) {
		t.Error("next's keys do not keep pg's CA")
	}
	if err := pki.SignedBy(server.Data[keyTLSCert], oldCA.Data[keyCACert]); err != nil {
		t.Errorf("next's server certificate by pg's CA: %v", err)
	}
	if pki.SignedBy(replication.Data[keyTLSCert], oldCA.Data[keyCACert]) == nil || pki.SignedBy(own.Data[keyOperatorCert], oldCA.Data[keyCACert]) == nil {
		t.Error("a client certificate of next is signed by pg's CA: pg's instances would accept it")
	}
	if string(server.Data[keyCACert]) != string(own.Data[keyClientCACert]) || len(own.Data[keyClientCACert]) == 0 {
		t.Error("next's instances trust client certificates from another CA than next's own")
	}
	cert, err := pki.ParseCertificate(server.Data[keyTLSCert])
	if err != nil {
		t.Fatal(err)
	}
	if err := cert.VerifyHostname("pg-rw." + ns + ".svc"); err != nil {
		t.Errorf("next's server certificate does not name pg-rw: %v", err)
	}

	// The import reports its cutover done (no instance manager runs here).
	clusterWhen(t, key, nextCreating)
	reportImport(t, key, tuskv1alpha1.ImportCutOver)
	servicesSelect(t, ns, "next")
	clusterWhen(t, client.ObjectKeyFromObject(old), func(c *tuskv1alpha1.PostgresCluster) error {
		if c.Status.ServedBy != "next" {
			return fmt.Errorf("servedBy %q, want next", c.Status.ServedBy)
		}
		return nil
	})
	waitForEvent(t, ns, "ServicesHandedOver", "next")

	if err := env.Client.Delete(ctx, next); err != nil {
		t.Fatal(err)
	}
	servicesSelect(t, ns, "pg")
	clusterWhen(t, client.ObjectKeyFromObject(old), func(c *tuskv1alpha1.PostgresCluster) error {
		if c.Status.ServedBy != "" {
			return fmt.Errorf("servedBy %q after next's deletion", c.Status.ServedBy)
		}
		return nil
	})
	waitForEvent(t, ns, "ServicesReturned", "next")
}

// servicesSelect waits until pg's three Services select cluster's
// instances.
func servicesSelect(t *testing.T, ns, cluster string) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		for _, name := range []string{"pg-rw", "pg-ro", "pg-r"} {
			svc := &corev1.Service{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, svc); err != nil {
				return err
			}
			if got := svc.Spec.Selector[LabelCluster]; got != cluster {
				return fmt.Errorf("Service %s selects the cluster %q, want %q", name, got, cluster)
			}
		}
		return nil
	})
}

// TestImportFromItselfIsRefused: a cluster naming itself, or a cluster
// that does not exist, as its import's source is refused with a reason,
// before any pod.
func TestImportFromItselfIsRefused(t *testing.T) {
	ns := newNamespace(t)
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "migrator"}, StringData: map[string]string{"password": "s3cret"}})
	for _, tc := range []struct{ name, source, message string }{
		{"pg", "pg", "spec.bootstrap.initdb.import.source.cluster names this cluster: a cluster cannot import from itself"},
		{"other", "ghost", "spec.bootstrap.initdb.import.source.cluster: there is no PostgresCluster ghost in namespace " + ns},
	} {
		c := newCluster(ns)
		c.Name = tc.name
		c.Spec.Bootstrap = migratorImport(tuskv1alpha1.ImportSource{Cluster: tc.source}, "")
		create(t, c)
		clusterWhen(t, client.ObjectKeyFromObject(c), failedSaying(tuskv1alpha1.ReasonImportSourceInvalid, tc.message))
	}
	noPods(t, ns)
}

// TestDeletedImportGoesWithoutItsPrimary: a cluster deleted while its
// logical import follows its source asks its primary to drop the slots;
// with no manager to answer (none runs here), it tries again for the
// grace (3 s in these tests), then goes, with a Warning naming the SQL
// to drop the slots on the source.
func TestDeletedImportGoesWithoutItsPrimary(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "migrator"}, StringData: map[string]string{"password": "s3cret"}})
	c := newCluster(ns)
	c.Spec.Bootstrap = migratorImport(tuskv1alpha1.ImportSource{Host: "legacy.example.com", SSLMode: "require"}, importMethodLogical)
	create(t, c)
	clusterWhen(t, client.ObjectKeyFromObject(c), creating)
	reportImport(t, client.ObjectKeyFromObject(c), tuskv1alpha1.ImportReplicating)
	if err := env.Client.Delete(ctx, c); err != nil {
		t.Fatal(err)
	}
	waitClusterGone(t, c)
	waitForEvent(t, ns, tuskv1alpha1.ReasonImportSlotsLeft, "pg_drop_replication_slot")
}

// reportImport writes status.import as the operator does when the
// primary reports its import in phase (no instance manager runs here),
// read afresh on each try: the operator writes the status too.
func reportImport(t *testing.T, key client.ObjectKey, phase tuskv1alpha1.ImportPhase) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := &tuskv1alpha1.PostgresCluster{}
		if err := env.Client.Get(context.Background(), key, c); err != nil {
			return err
		}
		c.Status.Import = &tuskv1alpha1.ImportStatus{Phase: phase, Message: "reported by the test"}
		return env.Client.Status().Update(context.Background(), c)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// migratorImport is a bootstrap importing the database app from source as
// migrator, whose password is the Secret migrator's.
func migratorImport(source tuskv1alpha1.ImportSource, method string) *tuskv1alpha1.BootstrapSpec {
	source.User = "migrator"
	source.PasswordSecret = corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "migrator"}, Key: "password"}
	return &tuskv1alpha1.BootstrapSpec{InitDB: &tuskv1alpha1.InitDBSpec{Import: &tuskv1alpha1.ImportSpec{
		Source: source, Databases: []string{"app"}, Method: method,
	}}}
}
