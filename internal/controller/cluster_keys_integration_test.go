//go:build integration

package controller

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/pki"
	"tusk.dev/tusk/internal/testenv"
)

// TestTenantHoldsNoKeyOfACAOrOfTheOperator performs the attack: whoever
// may read the cluster's namespace (the edit role) reads every Secret and
// ConfigMap there, looking for a private key of one of the cluster's CAs
// (to issue themselves any certificate) or of the operator's certificate
// (to drive the instance managers past the operator's checks). None is
// there, with Tusk's CA or the user's (whose cluster has a client CA of
// its own); the keys are in the operator's namespace.
func TestTenantHoldsNoKeyOfACAOrOfTheOperator(t *testing.T) {
	ns := newNamespace(t)
	own := newCluster(ns)
	userCA, err := pki.NewCA("users CA", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "users-ca"},
		Data: map[string][]byte{keyCACert: userCA.CertPEM, keyCAKey: userCA.KeyPEM}})
	theirs := newCluster(ns)
	theirs.Name = "theirs"
	theirs.Spec.TLS = &tuskv1alpha1.TLSSpec{CASecret: &corev1.LocalObjectReference{Name: "users-ca"}}
	for _, c := range []*tuskv1alpha1.PostgresCluster{own, theirs} {
		create(t, c)
		clusterWhen(t, client.ObjectKeyFromObject(c), func(c *tuskv1alpha1.PostgresCluster) error {
			if c.Status.LastInstanceSerial != 1 {
				return fmt.Errorf("lastInstanceSerial %d, want 1", c.Status.LastInstanceSerial)
			}
			return nil
		})
	}
	// The certificates whose keys no tenant may hold: each cluster's
	// operator certificate and the CA of its client certificates (the
	// user's own CA, whose key is in the user's Secret, issues the server
	// certificate only).
	ownKeys, theirKeys := keysOf(t, own).Data, keysOf(t, theirs).Data
	secret := [][]byte{ownKeys[keyOperatorCert], ownKeys[keyCACert], theirKeys[keyOperatorCert], theirKeys[keyClientCACert]}
	get(t, ns, "theirs-replication", &corev1.Secret{}) // every Secret of the clusters is made
	held := tenantPrivateKeys(t, ns)
	if len(held) < 4 { // the server's and replication user's of each cluster at least
		t.Fatalf("found %d private keys in namespace %s, want the leaf certificates' at least", len(held), ns)
	}
	for _, cert := range secret {
		if len(cert) == 0 {
			t.Fatal("a cluster's keys Secret lacks a certificate")
		}
		for where, key := range held {
			if _, err := tls.X509KeyPair(cert, key); err == nil {
				parsed, _ := pki.ParseCertificate(cert)
				t.Errorf("%s in the tenant's namespace is the private key of %q", where, parsed.Subject.CommonName)
			}
		}
	}
}

// tenantPrivateKeys are the PEM private keys in the Secrets and ConfigMaps
// of namespace ns, by where they are.
func tenantPrivateKeys(t *testing.T, ns string) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	values := map[string][]byte{}
	var secrets corev1.SecretList
	var maps corev1.ConfigMapList
	if err := env.Client.List(ctx, &secrets, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.List(ctx, &maps, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		for k, v := range s.Data {
			values["Secret "+s.Name+" "+k] = v
		}
	}
	for _, m := range maps.Items {
		for k, v := range m.Data {
			values["ConfigMap "+m.Name+" "+k] = []byte(v)
		}
	}
	keys := map[string][]byte{}
	for where, v := range values {
		for i := 0; ; i++ {
			var block *pem.Block
			if block, v = pem.Decode(v); block == nil {
				break
			}
			if strings.HasSuffix(block.Type, "PRIVATE KEY") {
				keys[fmt.Sprintf("%s (block %d)", where, i)] = pem.EncodeToMemory(block)
			}
		}
	}
	return keys
}

// TestKeysMoveFromAnEarlierTusk: the keys an earlier Tusk kept in the
// cluster's <cluster>-ca move to the operator's namespace when this one
// starts, the same CAs (its instances and clients trust them), and leave
// <cluster>-ca, with an Event that says who may still hold them.
func TestKeysMoveFromAnEarlierTusk(t *testing.T) {
	ctx := context.Background()
	ns := upgradeNamespace
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	clock := clocktesting.NewFakePassiveClock(time.Now())
	stop := startOperator(t, ns, clock)
	c := newCluster(ns)
	create(t, c)
	clusterWhen(t, client.ObjectKeyFromObject(c), creating)
	before := keysOf(t, c)
	stop()

	// <cluster>-ca as an earlier Tusk wrote it (its hash of other
	// content), and no keys Secret.
	public := get(t, ns, caSecretName(c), &corev1.Secret{})
	public.Data = before.Data
	public.Annotations[AnnotationHash] = "an-earlier-tusks"
	if err := env.Client.Update(ctx, public); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, before); err != nil {
		t.Fatal(err)
	}
	defer startOperator(t, ns, clock)()

	waitForEvent(t, ns, tuskv1alpha1.ReasonKeysMoved, keysSecretName(ns, c.Name))
	after := keysOf(t, c)
	for _, key := range []string{keyCACert, keyCAKey, keyOperatorCert, keyOperatorKey} {
		if !bytes.Equal(after.Data[key], before.Data[key]) {
			t.Errorf("the moved keys Secret's %s is not the one <cluster>-ca held", key)
		}
	}
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		s := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(public), s); err != nil {
			return err
		}
		if got := slices.Sorted(maps.Keys(s.Data)); !slices.Equal(got, []string{keyCACert}) {
			return fmt.Errorf("%s holds %v, want %s alone", s.Name, got, keyCACert)
		}
		return nil
	})
}

// TestNewClusterTakesNoKeyFromItsNamespace: a cluster that has made no
// instance never reads keys from its <cluster>-ca, where a tenant could
// have put a CA whose key they know: with its keys Secret gone, it makes
// new CAs, and <cluster>-ca is rewritten without the planted key.
func TestNewClusterTakesNoKeyFromItsNamespace(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "migrator"}, StringData: map[string]string{"password": "s3cret"}})
	c := newCluster(ns)
	c.Spec.Bootstrap = migratorImport(tuskv1alpha1.ImportSource{Cluster: "ghost"}, "") // no instance while ghost does not exist
	create(t, c)
	clusterWhen(t, client.ObjectKeyFromObject(c), failedSaying(tuskv1alpha1.ReasonImportSourceInvalid,
		"spec.bootstrap.initdb.import.source.cluster: there is no PostgresCluster ghost in namespace "+ns))
	before := keysOf(t, c)

	planted, err := pki.NewCA("planted", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	public := get(t, ns, caSecretName(c), &corev1.Secret{})
	public.Data = map[string][]byte{keyCACert: planted.CertPEM, keyCAKey: planted.KeyPEM}
	if err := env.Client.Update(ctx, public); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, before); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		after := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(before), after); err != nil {
			return err
		}
		if after.UID == before.UID {
			return fmt.Errorf("the keys Secret is still the one deleted")
		}
		if bytes.Equal(after.Data[keyCAKey], planted.KeyPEM) || bytes.Equal(after.Data[keyCAKey], before.Data[keyCAKey]) {
			t.Fatal("the cluster took a CA it did not make now")
		}
		s := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(public), s); err != nil {
			return err
		}
		if len(s.Data[keyCAKey]) > 0 || !bytes.Equal(s.Data[keyCACert], after.Data[keyCACert]) {
			return fmt.Errorf("%s holds %v, want the new CA's certificate alone", s.Name, slices.Sorted(maps.Keys(s.Data)))
		}
		return nil
	})
}

// TestKeysGoWithTheirCluster: a deleted cluster's keys Secret goes with
// it, by the finalizer; and one whose cluster is gone (someone removed
// the finalizer first) goes as soon as it is seen.
func TestKeysGoWithTheirCluster(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := newCluster(ns)
	create(t, c)
	keys := keysOf(t, c)
	if err := env.Client.Delete(ctx, c); err != nil {
		t.Fatal(err)
	}
	waitClusterGone(t, c)
	orphan := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: keysSecretName(ns, "ghost"),
		Labels: map[string]string{LabelCluster: "ghost", LabelClusterNamespace: ns, LabelClusterUID: "0f1e2d3c"}}}
	create(t, orphan)
	for _, s := range []*corev1.Secret{keys, orphan} {
		testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
			err := env.Client.Get(ctx, client.ObjectKeyFromObject(s), &corev1.Secret{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("the keys Secret %s is still there (%w)", s.Name, err)
		})
	}
}
