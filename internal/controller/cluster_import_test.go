package controller

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

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
