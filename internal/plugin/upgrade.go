package plugin

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// importRole is the role a logical upgrade's import logs in to the old
// cluster as.
const importRole = "upgrade_import"

type upgradeOptions struct {
	*options
	image   string
	logical bool
	name    string
	dbs     []string
	retry   bool
	restore string
	dryRun  bool
}

func newUpgradeCommand(o *options) *cobra.Command {
	uo := &upgradeOptions{options: o}
	cmd := &cobra.Command{
		Use:   "upgrade CLUSTER (--image IMAGE [--logical] | --retry | --restore-pre-upgrade NEW)",
		Short: "Upgrade a cluster to a newer PostgreSQL major: in place, or by a logical import into a new cluster",
		Long: `With --image alone, upgrade sets spec.image: the operator upgrades the data
in place with pg_upgrade (a pause of writes of about half a minute), and
rolls back on its own when anything fails before the new server's first
write.

With --image and --logical, upgrade creates a new cluster of that image
beside CLUSTER instead (named --name, by default CLUSTER-<major of the
image's tag>), which copies the schema and follows CLUSTER by logical
replication while it keeps taking writes: the import's role and its
password Secret, a publication in each database, and the new cluster
naming CLUSTER as bootstrap.initdb.import.source.cluster. Once the new
cluster is Replicating, kubectl tusk cutover NEW moves the writes over in
about a second, and CLUSTER's Services then send its clients to NEW.
CLUSTER needs spec.postgresql.parameters.wal_level: logical first.

--retry runs a failed in-place upgrade again once its cause is fixed;
--restore-pre-upgrade NEW creates a cluster NEW of the old image from the
backup taken before the last in-place upgrade: the way back once the new
server has taken writes. --dry-run prints the objects instead of creating
them.`,
		Example: `  kubectl tusk upgrade orders --image tusk/postgres:18
  kubectl tusk upgrade orders --image tusk/postgres:18 --logical
  kubectl tusk upgrade orders --retry
  kubectl tusk upgrade orders --restore-pre-upgrade orders-15 --dry-run`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return uo.run(cmd.Context(), args[0])
		},
	}
	f := cmd.Flags()
	f.StringVar(&uo.image, "image", "", "the image of the newer major")
	f.BoolVar(&uo.logical, "logical", false, "upgrade into a new cluster by logical replication instead of in place")
	f.StringVar(&uo.name, "name", "", "the new cluster's name with --logical (default CLUSTER-<major>)")
	f.StringSliceVar(&uo.dbs, "databases", nil, "the databases to move with --logical (default: the application database and the cluster's PostgresDatabases)")
	f.BoolVar(&uo.retry, "retry", false, "run a failed in-place upgrade again")
	f.StringVar(&uo.restore, "restore-pre-upgrade", "", "create this cluster, of the old image, from the backup taken before the last upgrade")
	f.BoolVar(&uo.dryRun, "dry-run", false, "print the objects as YAML instead of creating or changing anything")
	cmd.MarkFlagsMutuallyExclusive("image", "retry", "restore-pre-upgrade")
	cmd.MarkFlagsOneRequired("image", "retry", "restore-pre-upgrade")
	return cmd
}

func (uo *upgradeOptions) run(ctx context.Context, name string) error {
	if (uo.logical || uo.name != "" || len(uo.dbs) > 0) && uo.image == "" {
		return errors.New("--logical, --name and --databases go with --image")
	}
	cl, ns, err := uo.client()
	if err != nil {
		return err
	}
	old := &tuskv1alpha1.PostgresCluster{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, old); err != nil {
		return fmt.Errorf("while reading the cluster %s: %w", name, err)
	}
	switch {
	case uo.retry:
		return uo.retryUpgrade(ctx, cl, old)
	case uo.restore != "":
		restored, err := preUpgradeRestore(old, uo.restore)
		if err != nil {
			return err
		}
		return uo.createAll(ctx, cl, []client.Object{restored},
			fmt.Sprintf("Follow it with kubectl tusk status %s -n %s; it holds %s's data as of the backup %s, on %s.\n", uo.restore, ns, name, old.Status.MajorUpgrade.Backup, old.Status.MajorUpgrade.FromImage))
	case uo.logical:
		if err := logicalSourceReady(old); err != nil {
			return err
		}
		var list tuskv1alpha1.PostgresDatabaseList
		if err := cl.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return fmt.Errorf("while listing the PostgresDatabases: %w", err)
		}
		password, err := newPassword()
		if err != nil {
			return err
		}
		app, err := appCredentials(ctx, cl, old)
		if err != nil {
			return err
		}
		objs, err := logicalUpgradeObjects(old, list.Items, uo.image, uo.name, uo.dbs, password, app)
		if err != nil {
			return err
		}
		next := objs[len(objs)-1].GetName()
		return uo.createAll(ctx, cl, objs, fmt.Sprintf(
			"%s copies the schema and follows %s. Once kubectl tusk status %s -n %s says Replicating, move the writes over:\n  kubectl tusk cutover %s -n %s\n",
			next, name, next, ns, next, ns))
	}
	return uo.inPlace(ctx, cl, old)
}

// inPlace sets spec.image; the operator does the rest.
func (uo *upgradeOptions) inPlace(ctx context.Context, cl client.Client, old *tuskv1alpha1.PostgresCluster) error {
	if uo.dryRun {
		fmt.Fprintf(uo.streams.Out, "Would set spec.image of %s from %s to %s.\n", old.Name, old.Spec.Image, uo.image)
		return nil
	}
	patch := client.MergeFrom(old.DeepCopy())
	old.Spec.Image = uo.image
	if err := cl.Patch(ctx, old, patch); err != nil {
		return fmt.Errorf("while setting the image of %s: %w", old.Name, err)
	}
	fmt.Fprintf(uo.streams.Out, "Set the image of %s to %s: the operator upgrades it in place. Follow it with kubectl tusk status %s -n %s\n",
		old.Name, uo.image, old.Name, old.Namespace)
	return nil
}

// retryUpgrade names the failed attempt in the retry annotation.
func (uo *upgradeOptions) retryUpgrade(ctx context.Context, cl client.Client, c *tuskv1alpha1.PostgresCluster) error {
	u := c.Status.MajorUpgrade
	if u == nil || u.Phase != tuskv1alpha1.MajorUpgradeFailed {
		return fmt.Errorf("%s has no failed major upgrade to run again (kubectl tusk status %s)", c.Name, c.Name)
	}
	if u.ToImage != c.Spec.Image {
		return fmt.Errorf("%s's image is now %s, not the failed upgrade's %s: a change of image starts its own upgrade", c.Name, c.Spec.Image, u.ToImage)
	}
	if uo.dryRun {
		fmt.Fprintf(uo.streams.Out, "Would annotate %s with %s=%s.\n", c.Name, tuskv1alpha1.AnnotationRetryUpgrade, u.Attempt)
		return nil
	}
	if err := setAnnotation(ctx, cl, client.ObjectKeyFromObject(c), tuskv1alpha1.AnnotationRetryUpgrade, u.Attempt); err != nil {
		return err
	}
	fmt.Fprintf(uo.streams.Out, "Asked the operator to run the upgrade of %s to %s again (it failed with: %s). Follow it with kubectl tusk status %s -n %s\n",
		c.Name, u.ToImage, u.Message, c.Name, c.Namespace)
	return nil
}

// createAll creates objs in order (or prints them with --dry-run), then
// says what comes next.
func (uo *upgradeOptions) createAll(ctx context.Context, cl client.Client, objs []client.Object, next string) error {
	if uo.dryRun {
		return printYAML(uo.streams.Out, objs)
	}
	for _, o := range objs {
		if err := cl.Create(ctx, o); err != nil {
			return fmt.Errorf("while creating %s %s: %w", kindOf(o), o.GetName(), err)
		}
		fmt.Fprintf(uo.streams.Out, "Created %s %s\n", kindOf(o), o.GetName())
	}
	_, err := io.WriteString(uo.streams.Out, next)
	return err
}

// logicalUpgradeObjects are what a logical upgrade of old creates, in
// order: the copy of the application's credentials (below), the import
// role's password Secret, the role, a publication in
// each database, and the new cluster, which names old as its import's
// source cluster. Its spec is old's but for the image, the bootstrap and
// the backups (two clusters archiving to one place would mix their WAL).
//
// The application keeps its credentials: the new cluster names the
// old one's initdb Secret when it is the user's, or else a copy of the
// old cluster's <old>-app (app: its username and password), which is the
// old cluster's own and goes when it is deleted.
func logicalUpgradeObjects(old *tuskv1alpha1.PostgresCluster, databases []tuskv1alpha1.PostgresDatabase, image, name string, only []string,
	password string, app map[string][]byte) ([]client.Object, error) {
	if name == "" {
		major := regexp.MustCompile(`:(\d+)`).FindStringSubmatch(image)
		if major == nil {
			return nil, fmt.Errorf("the tag of %s does not start with a major version: name the new cluster with --name", image)
		}
		name = old.Name + "-" + major[1]
	}
	dbs, owners := upgradeDatabases(old, databases, only)
	ns := old.Namespace
	meta := func(n string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: n, Namespace: ns} }
	secretName := name + "-import"
	objs := []client.Object{
		&corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: meta(secretName),
			StringData: map[string]string{"password": password}},
		&tuskv1alpha1.PostgresRole{TypeMeta: typeMeta("PostgresRole"), ObjectMeta: meta(secretName), Spec: tuskv1alpha1.PostgresRoleSpec{
			Cluster: corev1.LocalObjectReference{Name: old.Name}, Name: importRole, Login: true, Replication: true,
			InRoles:        append(owners, "pg_signal_backend", "pg_read_all_data"),
			PasswordSecret: &corev1.LocalObjectReference{Name: secretName},
		}},
	}
	for _, db := range dbs {
		objs = append(objs, &tuskv1alpha1.PostgresPublication{TypeMeta: typeMeta("PostgresPublication"),
			ObjectMeta: meta(secretName + "-" + strings.ReplaceAll(db, "_", "-")), Spec: tuskv1alpha1.PostgresPublicationSpec{
				Cluster: corev1.LocalObjectReference{Name: old.Name}, Database: db, Name: "tusk_import", AllTables: true,
			}})
	}
	spec := *old.Spec.DeepCopy()
	spec.Image, spec.Backup = image, nil
	initdb := tuskv1alpha1.InitDBSpec{}
	if b := old.Spec.Bootstrap; b != nil && b.InitDB != nil {
		initdb.Database, initdb.Owner = b.InitDB.Database, b.InitDB.Owner
	}
	if b := old.Spec.Bootstrap; b != nil && b.InitDB != nil && b.InitDB.Secret != nil {
		initdb.Secret = b.InitDB.Secret
	} else {
		copied := name + "-app-credentials"
		objs = append([]client.Object{&corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: meta(copied),
			Data: map[string][]byte{"username": app["username"], "password": app["password"]}}}, objs...)
		initdb.Secret = &corev1.LocalObjectReference{Name: copied}
	}
	initdb.Import = &tuskv1alpha1.ImportSpec{
		Source: tuskv1alpha1.ImportSource{Cluster: old.Name, User: importRole,
			PasswordSecret: corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secretName}, Key: "password"}},
		Databases: dbs, Method: "logical",
	}
	spec.Bootstrap = &tuskv1alpha1.BootstrapSpec{InitDB: &initdb}
	return append(objs, &tuskv1alpha1.PostgresCluster{TypeMeta: typeMeta("PostgresCluster"), ObjectMeta: meta(name), Spec: spec}), nil
}

// logicalSourceReady refuses a source cluster without wal_level logical.
func logicalSourceReady(old *tuskv1alpha1.PostgresCluster) error {
	if old.Spec.PostgreSQL.Parameters["wal_level"] != "logical" {
		return fmt.Errorf("%s needs wal_level logical for a logical upgrade: set spec.postgresql.parameters.wal_level: logical (it restarts the cluster), then run this again", old.Name)
	}
	return nil
}

// appCredentials reads the old cluster's own application Secret, when the
// new cluster needs a copy of it (no initdb Secret of the user's).
func appCredentials(ctx context.Context, cl client.Client, old *tuskv1alpha1.PostgresCluster) (map[string][]byte, error) {
	if b := old.Spec.Bootstrap; b != nil && b.InitDB != nil && b.InitDB.Secret != nil {
		return nil, nil
	}
	secret := &corev1.Secret{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: old.Namespace, Name: old.Name + "-app"}, secret); err != nil {
		return nil, fmt.Errorf("while reading the application's credentials, to keep them in the new cluster: %w", err)
	}
	if len(secret.Data["username"]) == 0 || len(secret.Data["password"]) == 0 {
		return nil, fmt.Errorf("the Secret %s-app has no username or password to keep in the new cluster", old.Name)
	}
	return secret.Data, nil
}

// upgradeDatabases are the databases a logical upgrade moves (only, or
// the application database and the cluster's PostgresDatabases) and
// their owners, whom the import's role joins to make them read-only.
func upgradeDatabases(old *tuskv1alpha1.PostgresCluster, databases []tuskv1alpha1.PostgresDatabase, only []string) (dbs, owners []string) {
	appDB, appOwner := "app", "app"
	if b := old.Spec.Bootstrap; b != nil && b.InitDB != nil {
		appDB = cmp.Or(b.InitDB.Database, appDB)
		appOwner = cmp.Or(b.InitDB.Owner, appOwner)
	}
	ownerOf := map[string]string{appDB: appOwner}
	for _, d := range databases {
		if d.Spec.Cluster.Name == old.Name && d.Spec.Ensure != tuskv1alpha1.EnsureAbsent {
			ownerOf[d.Spec.Name] = d.Spec.Owner
		}
	}
	dbs = only
	if len(dbs) == 0 {
		for db := range ownerOf {
			dbs = append(dbs, db)
		}
	}
	slices.Sort(dbs)
	for _, db := range dbs {
		if o := ownerOf[db]; o != "" && !slices.Contains(owners, o) {
			owners = append(owners, o)
		}
	}
	return dbs, owners
}

// preUpgradeRestore is a cluster of the old image recovering from the
// backup taken before old's last in-place upgrade.
func preUpgradeRestore(old *tuskv1alpha1.PostgresCluster, name string) (*tuskv1alpha1.PostgresCluster, error) {
	u := old.Status.MajorUpgrade
	if u == nil || u.Backup == "" {
		return nil, fmt.Errorf("%s has no backup from before a major upgrade (one is taken when spec.backup is set)", old.Name)
	}
	spec := *old.Spec.DeepCopy()
	spec.Image, spec.Backup = u.FromImage, nil
	spec.Bootstrap = &tuskv1alpha1.BootstrapSpec{Recovery: &tuskv1alpha1.RecoverySpec{Backup: &corev1.LocalObjectReference{Name: u.Backup}}}
	return &tuskv1alpha1.PostgresCluster{TypeMeta: typeMeta("PostgresCluster"), ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: old.Namespace}, Spec: spec}, nil
}

func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: tuskv1alpha1.GroupVersion.String(), Kind: kind}
}

func kindOf(o client.Object) string {
	if k := o.GetObjectKind().GroupVersionKind().Kind; k != "" {
		return k
	}
	return fmt.Sprintf("%T", o)
}

// printYAML writes objs as one YAML stream, ready for kubectl apply.
func printYAML(w io.Writer, objs []client.Object) error {
	for i, o := range objs {
		data, err := yaml.Marshal(o)
		if err != nil {
			return err
		}
		if i > 0 {
			fmt.Fprintln(w, "---")
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
	}
	return nil
}

// newPassword is 24 random bytes, URL-safe.
func newPassword() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// setAnnotation sets one annotation of the cluster, retried on conflict.
func setAnnotation(ctx context.Context, cl client.Client, key client.ObjectKey, name, value string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := &tuskv1alpha1.PostgresCluster{}
		if err := cl.Get(ctx, key, c); err != nil {
			return fmt.Errorf("while reading the cluster %s: %w", key.Name, err)
		}
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[name] = value
		return cl.Update(ctx, c)
	})
}
