package controller

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/pki"
)

// Keys of the TLS Secrets.
const (
	keyCACert       = "ca.crt"
	keyCAKey        = "ca.key"
	keyTLSCert      = corev1.TLSCertKey
	keyTLSKey       = corev1.TLSPrivateKeyKey
	keyOperatorCert = "operator.crt"
	keyOperatorKey  = "operator.key"
	// keyClientCACert and keyClientCAKey hold, in the keys Secret, the
	// cluster's own client CA when the server certificate comes from a
	// user's CA (see reconcileTLS).
	keyClientCACert = "client-ca.crt"
	keyClientCAKey  = "client-ca.key"
)

// Certificate lifetimes: leaf certificates are renewed a month before they
// expire, so a cluster never serves an expired one.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 365 * 24 * time.Hour
	renewBefore  = 30 * 24 * time.Hour
)

// Common names of the client certificates.
const (
	// OperatorClientCN is the operator's identity towards instance managers.
	OperatorClientCN = instanceapi.DefaultAPIClientCN
	// replicationUser is the role replicas connect as (by certificate).
	replicationUser = "tusk_replication"
)

// clusterTLS is the cluster's CAs and the operator's client certificate.
type clusterTLS struct {
	// ca issues the server certificate: clients verify the server with it.
	// The client certificates come from the cluster's own CA (clientCA).
	ca       pki.KeyPair
	clientCA pki.KeyPair
	// keys is the cluster's keys Secret, in the operator's namespace
	// (keyStore): the CAs' keys and the operator's certificate.
	keys *corev1.Secret
}

// reconcileTLS makes the cluster's CAs, server certificate, replication
// client certificate and operator client certificate exist and stay valid.
//
// Client certificates prove an identity only within their CA, and their
// names (tusk_replication, tusk-operator) are the same in every cluster. A
// user's CA (spec.tls.caSecret) may be shared by clusters of many
// namespaces, so it only issues the server certificate, which clients
// verify by its DNS names; the client certificates come from a CA of the
// cluster's own, and the instances trust client certificates from that CA
// alone. A replication or operator certificate of one cluster is then
// refused by every other, whatever CA their servers share.
//
// The private keys of the CAs and of the operator's certificate stay in
// the operator's namespace (keyStore); <cluster>-ca holds the CAs'
// certificates only.
func (r *ClusterReconciler) reconcileTLS(ctx context.Context, c *tuskv1alpha1.PostgresCluster) (*clusterTLS, error) {
	keys, err := r.keysData(ctx, c)
	if err != nil {
		return nil, err
	}
	ca, err := r.clusterCA(ctx, c, keys.data)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	r.warnExpiringCA(c, ca, now)
	clientCA, data, err := clusterClientCA(c, ca, keys.data)
	if err != nil {
		return nil, err
	}
	operator, err := keepOrIssue(operatorCertData(keys.data), keyOperatorCert, keyOperatorKey, clientCA, nil, func() (pki.KeyPair, error) {
		return pki.IssueIdentityClient(clientCA, OperatorClientCN, instanceapi.OperatorIdentity, leafValidity, now)
	})
	if err != nil {
		return nil, err
	}
	data[keyCACert], data[keyOperatorCert], data[keyOperatorKey] = ca.CertPEM, operator.CertPEM, operator.KeyPEM
	keysSecret, err := r.keys.write(ctx, objectApplier{Client: r.Client, api: r.api}, c, data)
	if err != nil {
		return nil, err
	}
	if keys.moved {
		r.event(c, corev1.EventTypeNormal, tuskv1alpha1.ReasonKeysMoved, "TLS", "Moved the private keys of the cluster's CAs and of the operator's certificate "+
			"from the Secret %s to the operator's namespace (Secret %s/%s); whoever could read %s until now may still hold them: see docs/security.md to replace the CAs",
			caSecretName(c), keysSecret.Namespace, keysSecret.Name, caSecretName(c))
	}
	if err := r.reconcileCertificates(ctx, c, ca, clientCA, now); err != nil {
		return nil, err
	}
	return &clusterTLS{ca: ca, clientCA: clientCA, keys: keysSecret}, nil
}

// clusterKeys is what the keys Secret held, and whether it came from an
// earlier Tusk's <cluster>-ca (legacyKeys).
type clusterKeys struct {
	data  map[string][]byte
	moved bool
}

// keysData reads c's keys: from its keys Secret, or, for a cluster an
// earlier Tusk made, from its <cluster>-ca; none for a new cluster.
func (r *ClusterReconciler) keysData(ctx context.Context, c *tuskv1alpha1.PostgresCluster) (clusterKeys, error) {
	s, err := r.keys.of(ctx, c)
	if err != nil || s != nil {
		return clusterKeys{data: secretData(s)}, err
	}
	legacy, err := r.legacyKeys(ctx, c)
	return clusterKeys{data: legacy, moved: legacy != nil}, err
}

func secretData(s *corev1.Secret) map[string][]byte {
	if s == nil {
		return nil
	}
	return s.Data
}

// reconcileCertificates keeps the Secrets and ConfigMap of certificates in
// the cluster's namespace: <cluster>-ca (the CAs' certificates, no key),
// the server's and the replication user's.
func (r *ClusterReconciler) reconcileCertificates(ctx context.Context, c *tuskv1alpha1.PostgresCluster, ca, clientCA pki.KeyPair, now time.Time) error {
	public := map[string][]byte{keyCACert: ca.CertPEM}
	if !bytes.Equal(clientCA.CertPEM, ca.CertPEM) {
		public[keyClientCACert] = clientCA.CertPEM
	}
	if err := r.applyOwned(ctx, c, secret(c, caSecretName(c), corev1.SecretTypeOpaque, public)); err != nil {
		return err
	}
	// The server's ca.crt is what it trusts client certificates from; the
	// replication Secret's, what replicas verify their upstream with.
	if err := r.reconcileLeafSecret(ctx, c, serverSecretName(c), ca, clientCA.CertPEM, serverNames(c), func() (pki.KeyPair, error) {
		return pki.IssueServer(ca, rwServiceName(c), serverNames(c), []net.IP{net.IPv4(127, 0, 0, 1)}, leafValidity, now)
	}); err != nil {
		return err
	}
	if err := r.reconcileLeafSecret(ctx, c, replicationSecretName(c), clientCA, ca.CertPEM, nil, func() (pki.KeyPair, error) {
		return pki.IssueClient(clientCA, replicationUser, leafValidity, now)
	}); err != nil {
		return err
	}
	caMap := &corev1.ConfigMap{
		ObjectMeta: objectMeta(c, caConfigMapName(c)),
		Data:       map[string]string{keyCACert: string(ca.CertPEM)},
	}
	return r.applyOwned(ctx, c, caMap)
}

// clusterClientCA is the CA of the cluster's client certificates, and the
// keys of the keys Secret that keep it: the cluster's own CA (ca.key
// beside ca.crt), or, when ca is a user's, one made for the cluster and
// kept under client-ca.crt and client-ca.key (the user's key is never
// copied).
func clusterClientCA(c *tuskv1alpha1.PostgresCluster, ca pki.KeyPair, caData map[string][]byte) (pki.KeyPair, map[string][]byte, error) {
	if userCASecret(c) == "" && takesOverFrom(c) == nil {
		return ca, map[string][]byte{keyCAKey: ca.KeyPEM}, nil
	}
	own := pki.KeyPair{CertPEM: caData[keyClientCACert], KeyPEM: caData[keyClientCAKey]}
	if len(own.CertPEM) == 0 || len(own.KeyPEM) == 0 {
		var err error
		if own, err = pki.NewCA(c.Name+" PostgreSQL client CA", caValidity, time.Now()); err != nil {
			return pki.KeyPair{}, nil, err
		}
	}
	data := map[string][]byte{keyClientCACert: own.CertPEM, keyClientCAKey: own.KeyPEM}
	if userCASecret(c) == "" {
		// The server CA came from the cluster this one takes over from
		// (clusterCA); it is kept here so that deleting that cluster
		// leaves this one its CA.
		data[keyCAKey] = ca.KeyPEM
	}
	return own, data, nil
}

// userCASecret is the Secret of the user's CA (spec.tls.caSecret), "" when
// the cluster has Tusk's own.
func userCASecret(c *tuskv1alpha1.PostgresCluster) string {
	if c.Spec.TLS == nil || c.Spec.TLS.CASecret == nil {
		return ""
	}
	return c.Spec.TLS.CASecret.Name
}

// clusterCA is the user's CA when spec.tls.caSecret names one, else the
// CA Tusk made for the cluster, kept in keys (made now when there is none
// yet).
func (r *ClusterReconciler) clusterCA(ctx context.Context, c *tuskv1alpha1.PostgresCluster, keys map[string][]byte) (pki.KeyPair, error) {
	if name := userCASecret(c); name != "" {
		data, err := r.secrets.data(ctx, c.Namespace, name)
		if err != nil {
			return pki.KeyPair{}, err
		}
		ca := pki.KeyPair{CertPEM: data[keyCACert], KeyPEM: data[keyCAKey]}
		if len(ca.CertPEM) == 0 || len(ca.KeyPEM) == 0 {
			return pki.KeyPair{}, userError(tuskv1alpha1.ReasonCASecretInvalid, "the Secret %s named by spec.tls.caSecret needs the keys ca.crt and ca.key (PEM)", name)
		}
		return ca, nil
	}
	if ca := (pki.KeyPair{CertPEM: keys[keyCACert], KeyPEM: keys[keyCAKey]}); len(ca.CertPEM) > 0 && len(ca.KeyPEM) > 0 {
		return ca, nil
	}
	if inherited, err := r.takenOverCA(ctx, c); err != nil || len(inherited.KeyPEM) > 0 {
		return inherited, err
	}
	return pki.NewCA(c.Name+" PostgreSQL CA", caValidity, time.Now())
}

// takenOverCA is, for a new cluster whose Services will take over from
// another's (a logical import from a Tusk cluster), that cluster's own CA:
// its clients verify the server with it, and keep doing so once its
// Services send them here. Only the server certificate comes from it: the
// cluster's client certificates come from a CA of its own
// (clusterClientCA), so neither cluster accepts the other's replication
// or operator certificates. A source whose CA is a user's
// (spec.tls.caSecret) has no key to share: this cluster names that CA
// itself, or makes its own.
func (r *ClusterReconciler) takenOverCA(ctx context.Context, c *tuskv1alpha1.PostgresCluster) (pki.KeyPair, error) {
	from := takesOverFrom(c)
	if from == nil {
		return pki.KeyPair{}, nil
	}
	source := &tuskv1alpha1.PostgresCluster{}
	if err := r.Get(ctx, client.ObjectKeyFromObject(from), source); err != nil {
		return pki.KeyPair{}, client.IgnoreNotFound(err)
	}
	keys, err := r.keys.of(ctx, source)
	if err != nil || keys == nil || len(keys.Data[keyCAKey]) == 0 {
		return pki.KeyPair{}, err
	}
	return pki.KeyPair{CertPEM: keys.Data[keyCACert], KeyPEM: keys.Data[keyCAKey]}, nil
}

// reconcileLeafSecret keeps a certificate Secret (tls.crt, tls.key, ca.crt)
// valid: reissued by issuer when missing, expiring, from another CA or
// lacking names. Its ca.crt is trust: the CA its holder trusts peers from.
func (r *ClusterReconciler) reconcileLeafSecret(ctx context.Context, c *tuskv1alpha1.PostgresCluster, name string,
	issuer pki.KeyPair, trust []byte, names []string, issue func() (pki.KeyPair, error)) error {
	existing, err := r.secrets.data(ctx, c.Namespace, name)
	if err != nil {
		return err
	}
	kp, err := keepOrIssue(existing, keyTLSCert, keyTLSKey, issuer, names, issue)
	if err != nil {
		return err
	}
	s := secret(c, name, corev1.SecretTypeTLS, map[string][]byte{keyTLSCert: kp.CertPEM, keyTLSKey: kp.KeyPEM, keyCACert: trust})
	err = r.applyOwned(ctx, c, s)
	return err
}

// keepOrIssue returns the key pair stored under certKey/keyKey when it is
// still good, or a new one. A certificate that ends with its CA (issued
// when the CA had less than a leaf's validity left) is kept to the end:
// a new one could last no longer.
func keepOrIssue(data map[string][]byte, certKey, keyKey string, ca pki.KeyPair, names []string, issue func() (pki.KeyPair, error)) (pki.KeyPair, error) {
	kp := pki.KeyPair{CertPEM: data[certKey], KeyPEM: data[keyKey]}
	if len(kp.CertPEM) > 0 && len(kp.KeyPEM) > 0 && pki.SignedBy(kp.CertPEM, ca.CertPEM) == nil && pki.SANsMatch(kp.CertPEM, names) {
		now := time.Now()
		renew, err := pki.NeedsRenewal(kp.CertPEM, now, renewBefore)
		if err == nil && (!renew || endsWithCA(kp.CertPEM, ca.CertPEM, now)) {
			return kp, nil
		}
	}
	return issue()
}

// operatorCertData is caData when its operator certificate names the
// operator's identity, and nothing otherwise: a certificate an older Tusk
// issued (CN tusk-operator alone, which a PostgresRole's certificate could
// also have) is replaced at once. Instance managers of that older Tusk
// check the CN only, so they accept the new certificate too.
func operatorCertData(caData map[string][]byte) map[string][]byte {
	cert, err := pki.ParseCertificate(caData[keyOperatorCert])
	if err != nil || !pki.HasIdentity(cert, instanceapi.OperatorIdentity) {
		return nil
	}
	return caData
}

// endsWithCA says the certificate is valid now and ends when its CA does.
func endsWithCA(certPEM, caPEM []byte, now time.Time) bool {
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil {
		return false
	}
	ca, err := pki.ParseCertificate(caPEM)
	return err == nil && now.Before(cert.NotAfter) && !cert.NotAfter.Before(ca.NotAfter.Add(-time.Minute))
}

// serverNames are the DNS names the server certificate covers: every
// Service of the cluster, short and qualified, and those of the cluster
// it takes over from by a logical import, whose Services send their
// clients here after the cutover.
func serverNames(c *tuskv1alpha1.PostgresCluster) []string {
	var names []string
	for _, owner := range []*tuskv1alpha1.PostgresCluster{c, takesOverFrom(c)} {
		if owner == nil {
			continue
		}
		for _, svc := range []string{rwServiceName(owner), roServiceName(owner), rServiceName(owner)} {
			names = append(names, svc, svc+"."+c.Namespace, svc+"."+c.Namespace+".svc", svc+"."+c.Namespace+".svc.cluster.local")
		}
	}
	return append(names, "localhost")
}

// instanceServerName is the name the operator expects in an instance's
// certificate when it connects to the pod by IP.
func instanceServerName(c *tuskv1alpha1.PostgresCluster) string {
	return rServiceName(c) + "." + c.Namespace + ".svc"
}

func secret(c *tuskv1alpha1.PostgresCluster, name string, typ corev1.SecretType, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: objectMeta(c, name), Type: typ, Data: data}
}

// objectMeta is the metadata of an object Tusk owns for the cluster.
func objectMeta(c *tuskv1alpha1.PostgresCluster, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: clusterLabels(c)}
}

// caWarnEvery is how often a CA about to expire is warned about.
const caWarnEvery = time.Hour

// warnExpiringCA warns, with an Event at most every caWarnEvery, while the
// CA that issues the server certificate has less than renewBefore left:
// every certificate ends with it (pki caps them), and Tusk renews no CA.
func (r *ClusterReconciler) warnExpiringCA(c *tuskv1alpha1.PostgresCluster, ca pki.KeyPair, now time.Time) {
	cert, err := pki.ParseCertificate(ca.CertPEM)
	if err != nil {
		return
	}
	key := c.Namespace + "/" + c.Name
	if cert.NotAfter.Sub(now) >= renewBefore {
		r.caWarned.forget(key)
		return
	}
	if !r.caWarned.due(key, now, caWarnEvery) {
		return
	}
	how := fmt.Sprintf("ask the operator's administrator to delete the Secret %s in the operator's namespace %s: Tusk then makes new CAs and reissues every certificate (clients must then trust the new ca.crt)",
		keysSecretName(c.Namespace, c.Name), r.keys.namespace)
	if name := userCASecret(c); name != "" {
		how = fmt.Sprintf("put a renewed CA in the Secret %s (spec.tls.caSecret)", name)
	}
	r.event(c, corev1.EventTypeWarning, tuskv1alpha1.ReasonCAExpiring, "TLS", "The cluster's CA %q expires at %s; every certificate ends with it: %s",
		cert.Subject.CommonName, cert.NotAfter.UTC().Format(time.RFC3339), how)
}

// lastWarned remembers, per key, when a warning was last given.
type lastWarned struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// due says whether key is to be warned about now (never yet, or every
// ago), and records it when so.
func (w *lastWarned) due(key string, now time.Time, every time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if at, ok := w.last[key]; ok && now.Sub(at) < every {
		return false
	}
	if w.last == nil {
		w.last = map[string]time.Time{}
	}
	w.last[key] = now
	return true
}

func (w *lastWarned) forget(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.last, key)
}
