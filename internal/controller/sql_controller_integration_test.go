//go:build integration

package controller

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/pki"
	"tusk.dev/tusk/internal/testenv"
)

func newRole(ns, name, cluster string) *tuskv1alpha1.PostgresRole {
	return &tuskv1alpha1.PostgresRole{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       tuskv1alpha1.PostgresRoleSpec{Cluster: corev1.LocalObjectReference{Name: cluster}, Name: "app_user", Login: true},
	}
}

// sqlObjectWhen waits until o's Applied condition has the reason and its
// message contains message, for the object's current generation.
func sqlObjectWhen(t *testing.T, o client.Object, status func(client.Object) *tuskv1alpha1.SQLObjectStatus, reason, message string) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			return err
		}
		st := status(o)
		applied := meta.FindStatusCondition(st.Conditions, tuskv1alpha1.ConditionApplied)
		if applied == nil || applied.Reason != reason || !strings.Contains(applied.Message, message) || st.ObservedGeneration != o.GetGeneration() {
			return fmt.Errorf("%s: Applied %+v (observed generation %d of %d); want reason %s with %q",
				o.GetName(), applied, st.ObservedGeneration, o.GetGeneration(), reason, message)
		}
		return nil
	})
}

func roleStatus(o client.Object) *tuskv1alpha1.SQLObjectStatus {
	return &o.(*tuskv1alpha1.PostgresRole).Status
}

func databaseStatus(o client.Object) *tuskv1alpha1.SQLObjectStatus {
	return &o.(*tuskv1alpha1.PostgresDatabase).Status
}

// TestSQLObjectsWaitForTheirPrimary: a role of a cluster that does not
// exist waits, saying so with a Warning Event; once the cluster exists
// without a running primary (envtest has no kubelet), it waits for the
// primary. Ready follows Applied, and only the SQL reconciler writes the
// status.
func TestSQLObjectsWaitForTheirPrimary(t *testing.T) {
	ns := newNamespace(t)
	role := newRole(ns, "app", "pg")
	create(t, role)
	sqlObjectWhen(t, role, roleStatus, tuskv1alpha1.ReasonWaitingForPrimary, "the PostgresCluster pg does not exist")
	e := waitForEvent(t, ns, tuskv1alpha1.ReasonWaitingForPrimary, "the PostgresCluster pg does not exist")
	if e.Type != corev1.EventTypeWarning || e.Regarding.Name != "app" {
		t.Errorf("Event %s about %s, want a Warning about app", e.Type, e.Regarding.Name)
	}
	if ready := meta.FindStatusCondition(role.Status.Conditions, tuskv1alpha1.ConditionReady); ready == nil || ready.Status != metav1.ConditionFalse {
		t.Errorf("Ready %+v, want False while not applied", ready)
	}

	create(t, newCluster(ns))
	sqlObjectWhen(t, role, roleStatus, tuskv1alpha1.ReasonWaitingForPrimary, "pg")
	if err := statusWriters(get(t, ns, "app", &tuskv1alpha1.PostgresRole{}), SQLStatusOwner); err != nil {
		t.Error(err)
	}
}

// TestSQLObjectSecretsAndNames: a role whose password Secret is missing
// says so, and is woken when the Secret appears (through the Secret name
// watch); a second object naming the same role is refused as a conflict,
// the older one is not.
func TestSQLObjectSecretsAndNames(t *testing.T) {
	ns := newNamespace(t)
	create(t, newCluster(ns))
	role := newRole(ns, "app", "pg")
	role.Spec.PasswordSecret = &corev1.LocalObjectReference{Name: "app-password"}
	create(t, role)
	sqlObjectWhen(t, role, roleStatus, tuskv1alpha1.ReasonSourceInvalid, "the Secret app-password does not exist")

	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-password", Namespace: ns}, Data: map[string][]byte{"user": []byte("x")}})
	sqlObjectWhen(t, role, roleStatus, tuskv1alpha1.ReasonSourceInvalid, `the Secret app-password has no key "password"`)

	twin := newRole(ns, "app-twin", "pg")
	create(t, twin)
	sqlObjectWhen(t, twin, roleStatus, tuskv1alpha1.ReasonNameConflict, "PostgresRole app already manages \"app_user\"")
	// A superuser that logs in needs the cluster's spec.superuserAccess.
	dba := newRole(ns, "dba", "pg")
	dba.Spec.Name, dba.Spec.Superuser = "dba", true
	create(t, dba)
	sqlObjectWhen(t, dba, roleStatus, tuskv1alpha1.ReasonApplyRefused, "spec.superuserAccess is false")
	// The same name in another cluster is another role.
	other := newRole(ns, "app-other", "pg-other")
	create(t, other)
	sqlObjectWhen(t, other, roleStatus, tuskv1alpha1.ReasonWaitingForPrimary, "pg-other does not exist")
}

// TestRoleCreatorRefusedBelow16: on a cluster whose data is PostgreSQL 15
// and whose spec.superuserAccess is false, a role that logs in with
// CREATEROLE (which there grants itself pg_execute_server_program) is
// refused before it reaches the primary, on its status and with a Warning
// Event.
func TestRoleCreatorRefusedBelow16(t *testing.T) {
	ns := newNamespace(t)
	create(t, newCluster(ns))
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := &tuskv1alpha1.PostgresCluster{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "pg"}, c); err != nil {
			return err
		}
		c.Status.PostgresMajor = 15
		return env.Client.Status().Update(context.Background(), c)
	})
	if err != nil {
		t.Fatal(err)
	}
	hr := newRole(ns, "hr", "pg")
	hr.Spec.Name, hr.Spec.CreateRole = "hr", true
	create(t, hr)
	const says = "role hr would be a role with CREATEROLE (which on PostgreSQL 15 grants itself pg_execute_server_program)"
	sqlObjectWhen(t, hr, roleStatus, tuskv1alpha1.ReasonApplyRefused, says)
	if e := waitForEvent(t, ns, tuskv1alpha1.ReasonApplyRefused, says); e.Type != corev1.EventTypeWarning || e.Regarding.Name != "hr" {
		t.Errorf("Event %s about %s, want a Warning about hr", e.Type, e.Regarding.Name)
	}
}

// TestDatabaseFinalizerFollowsReclaimPolicy: a database that is retained
// carries no finalizer; reclaimPolicy delete adds one, so that deleting
// the object drops the database first; with no cluster left, there is
// nothing to drop and the object goes.
func TestDatabaseFinalizerFollowsReclaimPolicy(t *testing.T) {
	ns := newNamespace(t)
	db := &tuskv1alpha1.PostgresDatabase{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns},
		Spec: tuskv1alpha1.PostgresDatabaseSpec{Cluster: corev1.LocalObjectReference{Name: "pg"}, Name: "shop", Owner: "app",
			ReclaimPolicy: tuskv1alpha1.DatabaseReclaimRetain},
	}
	create(t, db)
	create(t, newCluster(ns))
	sqlObjectWhen(t, db, databaseStatus, tuskv1alpha1.ReasonWaitingForPrimary, "pg")
	if controllerutil.ContainsFinalizer(db, FinalizerSQL) {
		t.Fatalf("a retained database has the finalizer %s", FinalizerSQL)
	}

	patch := client.MergeFrom(db.DeepCopy())
	db.Spec.ReclaimPolicy = tuskv1alpha1.DatabaseReclaimDelete
	if err := env.Client.Patch(context.Background(), db, patch); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(db), db); err != nil {
			return err
		}
		if !controllerutil.ContainsFinalizer(db, FinalizerSQL) {
			return fmt.Errorf("finalizers %v, want %s", db.Finalizers, FinalizerSQL)
		}
		return nil
	})

	// Deleting waits for the primary to drop the database.
	if err := env.Client.Delete(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	sqlObjectWhen(t, db, databaseStatus, tuskv1alpha1.ReasonWaitingForPrimary, "pg")
	// With the cluster gone, there is nothing to drop.
	if err := env.Client.Delete(context.Background(), get(t, ns, "pg", &tuskv1alpha1.PostgresCluster{})); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(db), db)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("the database object is still there (finalizers %v): %w", db.Finalizers, err)
	})
}

// TestRoleClientCertificate: a role with clientCertificate gets no
// certificate while the primary has not applied it (here, as the cluster
// has no primary under envtest), and its status says so; once applied, a
// Secret with a certificate for its name from the cluster's client CA,
// owned by the PostgresRole, which it loses when it no longer asks.
func TestRoleClientCertificate(t *testing.T) {
	ns := newNamespace(t)
	create(t, newCluster(ns))
	role := newRole(ns, "reporter", "pg")
	role.Spec.ClientCertificate = true
	create(t, role)
	sqlObjectWhen(t, role, roleStatus, tuskv1alpha1.ReasonWaitingForPrimary,
		"the client certificate (Secret reporter-client-tls) is issued once the role is applied")
	s := &corev1.Secret{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "reporter-client-tls"}, s); !apierrors.IsNotFound(err) {
		t.Fatalf("the certificate Secret of a role not applied yet: %v, want none", err)
	}
	// The primary applied the role: what the reconciler does next.
	secrets := secretReader{cached: env.Client, api: env.Client}
	r := &SQLReconciler{Client: env.Client, secrets: secrets, api: env.Client, keys: keyStore{secrets: secrets, namespace: operatorNamespace}}
	var applied sqlApply
	// The cluster's keys come from its own reconcile, which may not have
	// run yet: the certificate waits for them, and says so.
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		applied = sqlApply{reason: tuskv1alpha1.ReasonApplied, message: "applied on the primary pg-1: created role app_user"}
		if err := r.issueRoleCertificateWhenApplied(ctx, role, get(t, ns, "pg", &tuskv1alpha1.PostgresCluster{}), &applied); err != nil {
			return err
		}
		if applied.reason != tuskv1alpha1.ReasonApplied {
			return fmt.Errorf("%s: %s", applied.reason, applied.message)
		}
		return nil
	})
	if applied.reason != tuskv1alpha1.ReasonApplied || !strings.HasSuffix(applied.message, "; its client certificate is in Secret reporter-client-tls") {
		t.Errorf("after issuing: %s %q, want Applied naming the Secret", applied.reason, applied.message)
	}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "reporter-client-tls"}, s); err != nil {
		t.Fatal(err)
	}
	ca := get(t, ns, "pg-ca", &corev1.Secret{})
	if err := pki.SignedBy(s.Data["tls.crt"], ca.Data["ca.crt"]); err != nil {
		t.Errorf("the role's certificate is not from the cluster's client CA: %v", err)
	}
	cert, err := pki.ParseCertificate(s.Data["tls.crt"])
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "app_user" || !bytes.Equal(s.Data["ca.crt"], ca.Data["ca.crt"]) || len(s.Data["tls.key"]) == 0 {
		t.Errorf("certificate for %q with ca.crt the server's CA: %v, want app_user and the cluster's CA", cert.Subject.CommonName, bytes.Equal(s.Data["ca.crt"], ca.Data["ca.crt"]))
	}
	if owner := metav1.GetControllerOf(s); owner == nil || owner.Name != "reporter" || owner.Kind != "PostgresRole" {
		t.Errorf("the Secret's controller is %+v, want the PostgresRole reporter", owner)
	}

	patch := client.MergeFrom(role.DeepCopy())
	role.Spec.ClientCertificate = false
	if err := env.Client.Patch(context.Background(), role, patch); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "reporter-client-tls"}, &corev1.Secret{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("the certificate Secret is still there: %w", err)
	})
}

// TestSubscriptionRefusedBeforePostgres16: on a cluster whose data is
// PostgreSQL 15 a subscription would apply rows as superuser (any
// subscribed table's owner could run code as superuser with a trigger):
// the operator refuses it without asking the primary, its conditions
// naming the version and why.
func TestSubscriptionRefusedBeforePostgres16(t *testing.T) {
	ns := newNamespace(t)
	create(t, newCluster(ns))
	key := client.ObjectKey{Namespace: ns, Name: "pg"}
	clusterWhen(t, key, creating)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := &tuskv1alpha1.PostgresCluster{}
		if err := env.Client.Get(context.Background(), key, c); err != nil {
			return err
		}
		c.Status.PostgresMajor = 15
		return env.Client.Status().Update(context.Background(), c, client.FieldOwner(StatusOwner))
	})
	if err != nil {
		t.Fatal(err)
	}
	sub := &tuskv1alpha1.PostgresSubscription{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: ns},
		Spec: tuskv1alpha1.PostgresSubscriptionSpec{Cluster: corev1.LocalObjectReference{Name: "pg"}, Name: "orders_sub", Database: "app",
			Publications: []string{"orders"}, Source: tuskv1alpha1.SubscriptionSource{
				ConnectionSecret: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "publisher"}, Key: "conninfo"}}},
	}
	create(t, sub)
	subStatus := func(o client.Object) *tuskv1alpha1.SQLObjectStatus {
		return &o.(*tuskv1alpha1.PostgresSubscription).Status
	}
	sqlObjectWhen(t, sub, subStatus, tuskv1alpha1.ReasonApplyRefused, "runs PostgreSQL 15, whose subscriptions apply rows as their owner, a superuser")
	ready := meta.FindStatusCondition(sub.Status.Conditions, tuskv1alpha1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != tuskv1alpha1.ReasonApplyRefused || !strings.Contains(ready.Message, "16 or later") {
		t.Errorf("Ready %+v, want False ApplyRefused saying 16 or later", ready)
	}
}
