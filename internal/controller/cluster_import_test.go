package controller

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

func importCluster() *tuskv1alpha1.PostgresCluster {
	c := defaultCluster()
	c.Spec.Bootstrap = &tuskv1alpha1.BootstrapSpec{InitDB: &tuskv1alpha1.InitDBSpec{Import: &tuskv1alpha1.ImportSpec{
		Source: tuskv1alpha1.ImportSource{
			Host: "legacy.example.com", User: "migrator",
			PasswordSecret: corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "legacy"}, Key: "pw"},
			CASecret:       &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "legacy-ca"}, Key: "root.pem"},
		},
		Databases: []string{"shop", "billing"},
	}}}
	return c
}

// TestImportPodMountsTheSourceKeys: the first instance of an importing
// cluster gets the source's address, each database, and the password and
// CA as files of read-only Secret volumes; defaults fill what the spec
// left out (verify-full, port 5432, database postgres); the pod keeps the
// cluster's spec hash, so it is not rolled once imported.
func TestImportPodMountsTheSourceKeys(t *testing.T) {
	c := importCluster()
	pod := instancePod(c, instanceName(c.Name, 1), instanceapi.RolePrimary, testManagerImage)
	withRecovery(pod, &recoverySource{imp: initDB(c).Import})
	checkSecretFileFlags(t, pod, map[string]secretFile{
		"--import-password-file": {"import-source", "legacy", "pw"},
		"--import-ca-file":       {"import-source-ca", "legacy-ca", "root.pem"},
	})
	args := pod.Spec.Containers[0].Command
	for flag, want := range map[string]string{
		"--import-host": "legacy.example.com", "--import-port": "5432", "--import-user": "migrator",
		"--import-sslmode": "verify-full", "--import-source-database": "postgres",
	} {
		if got := flagValue(args, flag); got != want {
			t.Errorf("%s=%q, want %q", flag, got, want)
		}
	}
	if !slices.Contains(args, "--import-database=shop") || !slices.Contains(args, "--import-database=billing") {
		t.Errorf("args %v: want --import-database for shop and billing", args)
	}
	if pod.Annotations[AnnotationHash] != podSpecHash(c, testManagerImage) {
		t.Error("the importing pod's spec hash is not the cluster's: it would be rolled once imported")
	}
}

// TestImportSecretsOnlyWhileCreating: the source's Secrets are mounted
// and watched until the cluster has served; after that a deleted source
// Secret changes nothing.
func TestImportSecretsOnlyWhileCreating(t *testing.T) {
	c := importCluster()
	if got := recoverySecrets(c); !slices.Equal(got, []string{"legacy", "legacy-ca"}) {
		t.Errorf("recoverySecrets while creating = %v, want [legacy legacy-ca]", got)
	}
	if !slices.Contains(userSecrets(c), "legacy") || !slices.Contains(mountedSecrets(c), "legacy-ca") {
		t.Errorf("userSecrets %v, mountedSecrets %v: want the import source's", userSecrets(c), mountedSecrets(c))
	}
	c.Status.Phase = tuskv1alpha1.ClusterPhaseHealthy
	if got := recoverySecrets(c); got != nil {
		t.Errorf("recoverySecrets once Healthy = %v, want none", got)
	}
}

// takeoverCluster is a cluster importing logically from the Tusk cluster
// "old" of its namespace.
func takeoverCluster() *tuskv1alpha1.PostgresCluster {
	c := importCluster()
	c.Name = "new"
	src := &initDB(c).Import.Source
	src.Host, src.CASecret, src.Cluster = "", nil, "old"
	initDB(c).Import.Method = importMethodLogical
	return c
}

// TestImportFromAClusterUsesItsServiceAndCA: a source named as a cluster
// is reached at its -rw Service and verified against the CA in its
// <cluster>-ca ConfigMap (the certificate only: the Secret with the key is
// never mounted).
func TestImportFromAClusterUsesItsServiceAndCA(t *testing.T) {
	c := takeoverCluster()
	pod := instancePod(c, instanceName(c.Name, 1), instanceapi.RolePrimary, testManagerImage)
	withRecovery(pod, &recoverySource{imp: resolvedImport(c, initDB(c).Import)})
	args := pod.Spec.Containers[0].Command
	if got, want := flagValue(args, "--import-host"), "old-rw."+c.Namespace+".svc"; got != want {
		t.Errorf("--import-host=%q, want %q", got, want)
	}
	file := flagValue(args, "--import-ca-file")
	vol, mount := volumeNamed(pod, "import-source-ca"), mountNamed(pod.Spec.Containers[0], "import-source-ca")
	if file == "" || vol == nil || vol.ConfigMap == nil || vol.Secret != nil || mount == nil || !mount.ReadOnly {
		t.Fatalf("--import-ca-file=%q, volume %+v, mount %+v: want a read-only ConfigMap volume", file, vol, mount)
	}
	if vol.ConfigMap.Name != "old-ca" || !slices.Equal(vol.ConfigMap.Items, []corev1.KeyToPath{{Key: keyCACert, Path: fileImportCA}}) ||
		file != mount.MountPath+"/"+fileImportCA {
		t.Errorf("CA volume %+v at %s, file %s: want old-ca's ca.crt", vol.ConfigMap, mount.MountPath, file)
	}
	if initDB(c).Import.Source.Host != "" {
		t.Error("resolvedImport changed the cluster's spec")
	}
}

// TestTakeoverCertificateCoversTheSourceServices: the importing cluster's
// server certificate names the source's Services too (clients keep
// verifying the name they connect to), and only for a logical import.
func TestTakeoverCertificateCoversTheSourceServices(t *testing.T) {
	c := takeoverCluster()
	names := serverNames(c)
	for _, want := range []string{"new-rw", "old-rw", "old-ro." + c.Namespace + ".svc", "old-r." + c.Namespace + ".svc.cluster.local"} {
		if !slices.Contains(names, want) {
			t.Errorf("serverNames %v lack %s", names, want)
		}
	}
	initDB(c).Import.Method = "dump"
	if slices.Contains(serverNames(c), "old-rw") {
		t.Error("a dump import's certificate names the source's Services: nothing hands them over")
	}
}

// TestServedByTheClusterThatCutOver: a source's Services follow the
// cluster whose logical import from it has cut over, not one still
// replicating, being deleted, importing from another cluster or by dump;
// of two, always the same one.
func TestServedByTheClusterThatCutOver(t *testing.T) {
	old := defaultCluster()
	old.Name = "old"
	withPhase := func(name string, phase tuskv1alpha1.ImportPhase, edit func(*tuskv1alpha1.PostgresCluster)) tuskv1alpha1.PostgresCluster {
		c := takeoverCluster()
		c.Name, c.Status.Import = name, &tuskv1alpha1.ImportStatus{Phase: phase}
		if edit != nil {
			edit(c)
		}
		return *c
	}
	deleting := func(c *tuskv1alpha1.PostgresCluster) { c.DeletionTimestamp = &metav1.Time{Time: time.Now()} }
	otherSource := func(c *tuskv1alpha1.PostgresCluster) { initDB(c).Import.Source.Cluster = "elsewhere" }
	byDump := func(c *tuskv1alpha1.PostgresCluster) { initDB(c).Import.Method = "dump" }
	cases := []struct {
		name     string
		clusters []tuskv1alpha1.PostgresCluster
		want     string
	}{
		{"replicating", []tuskv1alpha1.PostgresCluster{*old, withPhase("n1", tuskv1alpha1.ImportReplicating, nil)}, ""},
		{"cutover failed", []tuskv1alpha1.PostgresCluster{withPhase("n1", tuskv1alpha1.ImportCutoverFailed, nil)}, ""},
		{"cut over", []tuskv1alpha1.PostgresCluster{*old, withPhase("n1", tuskv1alpha1.ImportCutOver, nil)}, "n1"},
		{"being deleted", []tuskv1alpha1.PostgresCluster{withPhase("n1", tuskv1alpha1.ImportCutOver, deleting)}, ""},
		{"from another cluster", []tuskv1alpha1.PostgresCluster{withPhase("n1", tuskv1alpha1.ImportCutOver, otherSource)}, ""},
		{"by dump", []tuskv1alpha1.PostgresCluster{withPhase("n1", tuskv1alpha1.ImportCutOver, byDump)}, ""},
		{"two", []tuskv1alpha1.PostgresCluster{withPhase("n2", tuskv1alpha1.ImportCutOver, nil), withPhase("n1", tuskv1alpha1.ImportCutOver, nil)}, "n1"},
	}
	for _, tc := range cases {
		if got := servedBy(old, tc.clusters); got != tc.want {
			t.Errorf("%s: servedBy = %q, want %q", tc.name, got, tc.want)
		}
	}
	services := clusterServices(old, "n1")
	for _, svc := range services {
		if svc.Name[:4] != "old-" || svc.Spec.Selector[LabelCluster] != "n1" {
			t.Errorf("Service %s selects %v, want the old name selecting n1's instances", svc.Name, svc.Spec.Selector)
		}
	}
	if got := services[0].Spec.Selector[LabelRole]; got != string(instanceapi.RolePrimary) {
		t.Errorf("old-rw selects role %q, want the primary", got)
	}
}

// TestLogicalImportNeedsPostgres16: a logical import into an image that
// names PostgreSQL 15 is refused with a reason and a message that says
// why; 16 and later, a dump import, and an image naming no version pass.
func TestLogicalImportNeedsPostgres16(t *testing.T) {
	for _, tt := range []struct {
		image, method string
		refused       bool
	}{
		{"postgres:15.8", "logical", true},
		{"registry.example/tusk/postgres:13-bookworm", "logical", true},
		{"postgres:16.4", "logical", false},
		{"postgres:17", "logical", false},
		{"postgres:15.8", "dump", false},
		{"postgres:15.8", "", false},
		{"postgres@sha256:0123", "logical", false},
	} {
		c := importCluster()
		c.Spec.Image = tt.image
		initDB(c).Import.Method = tt.method
		err := requireLogicalImportMajor(c, initDB(c).Import)
		se, ok := asSpecError(err)
		switch {
		case !tt.refused && err != nil:
			t.Errorf("%s, method %q: %v, want no refusal", tt.image, tt.method, err)
		case tt.refused && (!ok || se.reason != tuskv1alpha1.ReasonImportSourceInvalid ||
			!strings.Contains(se.message, "16 or later") || !strings.Contains(se.message, "superuser")):
			t.Errorf("%s, method %q: %v, want an ImportSourceInvalid refusal saying 16 or later and why", tt.image, tt.method, err)
		}
	}
}

// TestUnverifiedImportSource: an import from a server it does not verify
// is warned about; one that verifies it, or a Tusk cluster, is not.
func TestUnverifiedImportSource(t *testing.T) {
	for src, want := range map[tuskv1alpha1.ImportSource]string{
		{Host: "legacy", SSLMode: "require"}:     "the import from legacy uses sslMode require: the server is not verified",
		{Host: "legacy", SSLMode: "disable"}:     "uses sslMode disable",
		{Host: "legacy", SSLMode: "verify-full"}: "",
		{Host: "legacy", SSLMode: "verify-ca"}:   "",
		{Cluster: "old"}:                         "",
	} {
		if got := unverifiedImportSource(src); (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("unverifiedImportSource(%+v) = %q, want %q", src, got, want)
		}
	}
}
