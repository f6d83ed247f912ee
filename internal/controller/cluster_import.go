package controller

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
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
	if err := r.requireImportSourceCluster(ctx, c, imp); err != nil {
		return nil, err
	}
	if err := requireLogicalImportMajor(c, imp); err != nil {
		return nil, err
	}
	if err := r.requireSecretKeysAs(ctx, c, tuskv1alpha1.ReasonImportSourceInvalid, field+".passwordSecret", imp.Source.PasswordSecret.Name, imp.Source.PasswordSecret.Key); err != nil {
		return nil, err
	}
	if ca := imp.Source.CASecret; ca != nil {
		if err := r.requireSecretKeysAs(ctx, c, tuskv1alpha1.ReasonImportSourceInvalid, field+".caSecret", ca.Name, ca.Key); err != nil {
			return nil, err
		}
	}
	if why := unverifiedImportSource(imp.Source); why != "" {
		r.event(c, corev1.EventTypeWarning, tuskv1alpha1.ReasonImportSourceUnverified, "Import", "%s", why)
	}
	return &recoverySource{imp: resolvedImport(c, imp)}, nil
}

// unverifiedImportSource says why an import from a server anywhere does
// not know whom it sends the source's password to and copies from ("" when
// it does: sslMode verify-ca or verify-full, or a Tusk cluster, whose CA
// the operator has): the import reads every row through it.
func unverifiedImportSource(src tuskv1alpha1.ImportSource) string {
	if src.Cluster != "" || src.SSLMode == "verify-full" || src.SSLMode == "verify-ca" {
		return ""
	}
	return fmt.Sprintf("the import from %s uses sslMode %s: the server is not verified, so whoever answers at that address gets the "+
		"import's password and gives the new cluster its data; set sslMode verify-full with the source's CA in caSecret", src.Host, cmp.Or(src.SSLMode, "(unset)"))
}

// minLogicalImportMajor is the first PostgreSQL major whose subscriptions
// apply as each table's owner. Before it they apply as a superuser, so the
// owner of any imported table could run code as superuser here (a trigger
// ENABLE ALWAYS); the instance manager refuses such an import too.
const minLogicalImportMajor = 16

// requireLogicalImportMajor refuses a logical import whose image names a
// major older than minLogicalImportMajor. An image that names none (a
// digest) is left to the instance manager, which knows its server.
func requireLogicalImportMajor(c *tuskv1alpha1.PostgresCluster, imp *tuskv1alpha1.ImportSpec) error {
	major := imageMajor(c.Spec.Image)
	if imp.Method != importMethodLogical || major == 0 || major >= minLogicalImportMajor {
		return nil
	}
	return userError(tuskv1alpha1.ReasonImportSourceInvalid, "spec.bootstrap.initdb.import.method logical needs PostgreSQL %d or later, "+
		"and spec.image names %d: before %d a subscription applies the source's rows as superuser, so the owner of any imported table "+
		"could run code as superuser (a trigger ENABLE ALWAYS). Use an image of PostgreSQL %d or later, or method dump",
		minLogicalImportMajor, major, minLogicalImportMajor, minLogicalImportMajor)
}

// requireImportSourceCluster checks a source named as a Tusk cluster: one
// of this namespace, other than this one.
func (r *ClusterReconciler) requireImportSourceCluster(ctx context.Context, c *tuskv1alpha1.PostgresCluster, imp *tuskv1alpha1.ImportSpec) error {
	name := imp.Source.Cluster
	if name == "" {
		return nil
	}
	if name == c.Name {
		return userError(tuskv1alpha1.ReasonImportSourceInvalid, "spec.bootstrap.initdb.import.source.cluster names this cluster: a cluster cannot import from itself")
	}
	var src tuskv1alpha1.PostgresCluster
	if err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, &src); err != nil {
		if apierrors.IsNotFound(err) {
			return userError(tuskv1alpha1.ReasonImportSourceInvalid, "spec.bootstrap.initdb.import.source.cluster: there is no PostgresCluster %s in namespace %s", name, c.Namespace)
		}
		return err
	}
	return nil
}

// resolvedImport is the import as the pod runs it: a source named as a
// cluster becomes that cluster's -rw Service, verified against its CA.
func resolvedImport(c *tuskv1alpha1.PostgresCluster, imp *tuskv1alpha1.ImportSpec) *tuskv1alpha1.ImportSpec {
	if imp.Source.Cluster == "" {
		return imp
	}
	out := imp.DeepCopy()
	out.Source.Host = rwServiceName(siblingCluster(c.Namespace, imp.Source.Cluster)) + "." + c.Namespace + ".svc"
	return out
}

// importCAFromCluster says the import verifies its source against the
// source cluster's CA, from that cluster's <cluster>-ca ConfigMap (which
// holds no key).
func importCAFromCluster(imp *tuskv1alpha1.ImportSpec) bool {
	return imp.Source.Cluster != "" && imp.Source.CASecret == nil
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
	if s.CASecret != nil || importCAFromCluster(imp) {
		args = append(args, "--import-ca-file="+importSourceMount+"-ca/"+fileImportCA)
	}
	if imp.Method != "" {
		args = append(args, "--import-method="+imp.Method)
	}
	if imp.Publication != "" {
		args = append(args, "--import-publication="+imp.Publication)
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
	} else if importCAFromCluster(imp) {
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "import-source-ca", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: caConfigMapName(siblingCluster(pod.Namespace, imp.Source.Cluster))},
			Items:                []corev1.KeyToPath{{Key: keyCACert, Path: fileImportCA}},
		}}})
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: "import-source-ca", MountPath: importSourceMount + "-ca", ReadOnly: true})
	}
	ctr.Command = append(ctr.Command, importArgs(imp)...)
}

// logicalImport says the cluster follows its import's source by logical
// replication until a cutover.
func logicalImport(c *tuskv1alpha1.PostgresCluster) bool {
	imp := initDB(c).Import
	return imp != nil && imp.Method == importMethodLogical
}

const importMethodLogical = "logical"

// reconcileImport follows a logical import: the primary's report becomes
// status.import, with an Event at each change of phase, and the
// tusk.dev/import-cutover annotation starts the cutover on the primary
// (once per value).
func (r *ClusterReconciler) reconcileImport(ctx context.Context, c *tuskv1alpha1.PostgresCluster, v *view, ic *instanceClient) error {
	if !logicalImport(c) {
		return nil
	}
	primary := v.member(c.Status.CurrentPrimary)
	if primary == nil || primary.pod == nil || primary.status == nil || primary.status.Import == nil {
		return nil
	}
	reported := importStatus(primary.status.Import)
	if old := c.Status.Import; old == nil || old.Phase != reported.Phase {
		r.importEvent(c, reported)
	}
	c.Status.Import = reported
	want := c.Annotations[tuskv1alpha1.AnnotationImportCutover]
	if want == "" || reported.Phase == tuskv1alpha1.ImportCutOver || reported.Phase == tuskv1alpha1.ImportCuttingOver ||
		(reported.Phase == tuskv1alpha1.ImportCutoverFailed && reported.Cutover == want) {
		return nil
	}
	if err := ic.call(ctx, primary.pod, http.MethodPost, instanceapi.PathImportCutover, instanceapi.ImportCutoverRequest{Cutover: want}, nil); err != nil {
		return fmt.Errorf("while asking %s for the import's cutover: %w", primary.name, err)
	}
	c.Status.Import.Phase, c.Status.Import.Cutover = tuskv1alpha1.ImportCuttingOver, want
	c.Status.Import.Message = "making the source read-only and applying its last changes"
	r.importEvent(c, c.Status.Import)
	return nil
}

// cuttingOver says a logical import's cutover is under way.
func cuttingOver(c *tuskv1alpha1.PostgresCluster) bool {
	return c.Status.Import != nil && c.Status.Import.Phase == tuskv1alpha1.ImportCuttingOver
}

func importStatus(s *instanceapi.ImportStatus) *tuskv1alpha1.ImportStatus {
	st := &tuskv1alpha1.ImportStatus{Phase: tuskv1alpha1.ImportPhase(s.Phase), Message: s.Message, Cutover: s.Cutover}
	if s.WriteGapSeconds > 0 {
		st.WriteGap = &metav1.Duration{Duration: time.Duration(s.WriteGapSeconds * float64(time.Second)).Round(time.Millisecond)}
	}
	return st
}

func (r *ClusterReconciler) importEvent(c *tuskv1alpha1.PostgresCluster, s *tuskv1alpha1.ImportStatus) {
	eventType := corev1.EventTypeNormal
	if s.Phase == tuskv1alpha1.ImportCutoverFailed {
		eventType = corev1.EventTypeWarning
	}
	r.event(c, eventType, "Import"+string(s.Phase), "Import", "%s", s.Message)
}
