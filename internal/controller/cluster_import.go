package controller

import (
	"context"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// importSourceMount is where an importing first instance mounts the
// source's password and CA.
const importSourceMount = "/etc/tusk/secrets/import-source"

const (
	fileImportPassword = "password"
	fileImportCA       = "ca.crt"
)

// importPending says the cluster bootstraps with an import and its first
// primary has not served yet: only then are the source's Secrets needed.
func importPending(c *tuskv1alpha1.PostgresCluster) bool {
	return initDB(c).Import != nil && stillCreating(c)
}

// importSecrets are the source's Secrets a pending import mounts.
func importSecrets(c *tuskv1alpha1.PostgresCluster) []string {
	if !importPending(c) {
		return nil
	}
	src := initDB(c).Import.Source
	names := []string{src.PasswordSecret.Name}
	if src.CASecret != nil {
		names = append(names, src.CASecret.Name)
	}
	return names
}

// reconcileImportSource checks the Secrets of a pending import: a missing
// one is the user's to fix (its watch wakes the cluster).
func (r *ClusterReconciler) reconcileImportSource(ctx context.Context, c *tuskv1alpha1.PostgresCluster) (*recoverySource, error) {
	if !importPending(c) {
		return nil, nil
	}
	imp := initDB(c).Import
	const field = "spec.bootstrap.initdb.import.source"
	if err := r.requireSecretKeysAs(ctx, c, tuskv1alpha1.ReasonImportSourceInvalid, field+".passwordSecret", imp.Source.PasswordSecret.Name, imp.Source.PasswordSecret.Key); err != nil {
		return nil, err
	}
	if ca := imp.Source.CASecret; ca != nil {
		if err := r.requireSecretKeysAs(ctx, c, tuskv1alpha1.ReasonImportSourceInvalid, field+".caSecret", ca.Name, ca.Key); err != nil {
			return nil, err
		}
	}
	return &recoverySource{imp: imp}, nil
}

// importArgs tell the first instance's manager what to import from where.
func importArgs(imp *tuskv1alpha1.ImportSpec) []string {
	s := imp.Source
	port, database, sslMode := s.Port, s.Database, s.SSLMode
	if port == 0 {
		port = postgresPort
	}
	if database == "" {
		database = "postgres"
	}
	if sslMode == "" {
		sslMode = "verify-full"
	}
	args := []string{
		"--import-host=" + s.Host, "--import-port=" + strconv.Itoa(int(port)), "--import-user=" + s.User,
		"--import-password-file=" + importSourceMount + "/" + fileImportPassword,
		"--import-source-database=" + database, "--import-sslmode=" + sslMode,
	}
	if s.CASecret != nil {
		args = append(args, "--import-ca-file="+importSourceMount+"-ca/"+fileImportCA)
	}
	for _, db := range imp.Databases {
		args = append(args, "--import-database="+db)
	}
	return args
}

// withImport adds the import source to a primary's pod: the flags, and
// the password and CA mounted read-only like the cluster's own Secrets.
func withImport(pod *corev1.Pod, imp *tuskv1alpha1.ImportSpec) {
	spec := &pod.Spec
	ctr := &spec.Containers[0]
	pw := imp.Source.PasswordSecret
	spec.Volumes = append(spec.Volumes, secretItemsVolume("import-source", pw.Name, corev1.KeyToPath{Key: pw.Key, Path: fileImportPassword}))
	ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: "import-source", MountPath: importSourceMount, ReadOnly: true})
	if ca := imp.Source.CASecret; ca != nil {
		spec.Volumes = append(spec.Volumes, secretItemsVolume("import-source-ca", ca.Name, corev1.KeyToPath{Key: ca.Key, Path: fileImportCA}))
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: "import-source-ca", MountPath: importSourceMount + "-ca", ReadOnly: true})
	}
	ctr.Command = append(ctr.Command, importArgs(imp)...)
}
