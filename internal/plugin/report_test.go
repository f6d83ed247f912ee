package plugin

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// TestAboutCluster: the operator's lines in a report are those its
// controllers wrote about the cluster or an object of it in its
// namespace, by their parsed fields; a line of another namespace that
// merely quotes the same names is left out.
func TestAboutCluster(t *testing.T) {
	c := &tuskv1alpha1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Name: "pg", Namespace: "db"}}
	objects := map[string]bool{"PostgresCluster/pg": true, "PostgresBackup/pg-nightly": true}
	about := aboutCluster(c, objects)
	for line, want := range map[string]bool{
		`{"msg":"Configured instance","controllerKind":"PostgresCluster","namespace":"db","name":"pg","instance":"pg-1"}`:      true,
		`{"msg":"Backup completed","controllerKind":"PostgresBackup","namespace":"db","name":"pg-nightly"}`:                    true,
		`{"msg":"Configured instance","controllerKind":"PostgresCluster","namespace":"other","name":"pg"}`:                     false,
		`{"msg":"user \"db\" wrote \"pg\"","controllerKind":"PostgresCluster","namespace":"tenant-b","name":"secret-cluster"}`: false,
		`{"msg":"Reconciling","controllerKind":"PostgresBackup","namespace":"db","name":"pg"}`:                                 false,
		`plain text naming "db" and "pg"`: false,
	} {
		if got := about(line); got != want {
			t.Errorf("aboutCluster(%s) = %v, want %v", line, got, want)
		}
	}
}

// TestNamedSecrets: every Secret of the user's that a cluster's spec or
// its SQL objects name is read, so its values are redacted.
func TestNamedSecrets(t *testing.T) {
	c := &tuskv1alpha1.PostgresCluster{Spec: tuskv1alpha1.PostgresClusterSpec{
		SuperuserSecret: &corev1.LocalObjectReference{Name: "su"},
		TLS:             &tuskv1alpha1.TLSSpec{CASecret: &corev1.LocalObjectReference{Name: "tls-ca"}},
		Backup: &tuskv1alpha1.BackupSpec{ObjectStore: tuskv1alpha1.ObjectStoreSpec{
			CredentialsSecret: tuskv1alpha1.S3CredentialsSecret{Name: "s3"},
			CASecret:          &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s3-ca"}}}},
		Bootstrap: &tuskv1alpha1.BootstrapSpec{InitDB: &tuskv1alpha1.InitDBSpec{
			Secret: &corev1.LocalObjectReference{Name: "owner"},
			Import: &tuskv1alpha1.ImportSpec{Source: tuskv1alpha1.ImportSource{
				PasswordSecret: corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "import-pw"}},
				CASecret:       &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "import-ca"}}}}}},
	}}
	got := append(namedSecrets(c), sqlObjectSecrets([]client.Object{
		&tuskv1alpha1.PostgresRole{Spec: tuskv1alpha1.PostgresRoleSpec{PasswordSecret: &corev1.LocalObjectReference{Name: "role-pw"}}},
		&tuskv1alpha1.PostgresSubscription{Spec: tuskv1alpha1.PostgresSubscriptionSpec{Source: tuskv1alpha1.SubscriptionSource{
			RoleSecret:       &corev1.LocalObjectReference{Name: "sub-role"},
			ConnectionSecret: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "sub-conn"}}}}},
	})...)
	for _, want := range []string{"su", "tls-ca", "s3", "s3-ca", "owner", "import-pw", "import-ca", "role-pw", "sub-role", "sub-conn"} {
		if !slices.Contains(got, want) {
			t.Errorf("the Secret %s is not read for redaction (got %v)", want, got)
		}
	}
}
