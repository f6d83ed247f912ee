package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/pki"
)

// roleCertSecretName is the Secret of a PostgresRole's client certificate.
func roleCertSecretName(role *tuskv1alpha1.PostgresRole) string { return role.Name + "-client-tls" }

// wantsCertificate says whether the role asks for a client certificate.
func wantsCertificate(role *tuskv1alpha1.PostgresRole) bool {
	return role.Spec.ClientCertificate && role.Spec.Ensure != tuskv1alpha1.EnsureAbsent
}

// removeUnwantedRoleCertificate removes the role's client certificate
// Secret when spec.clientCertificate no longer asks for it, before the
// apply: a certificate outlives nothing it was issued for.
func (r *SQLReconciler) removeUnwantedRoleCertificate(ctx context.Context, role *tuskv1alpha1.PostgresRole) error {
	if wantsCertificate(role) {
		return nil
	}
	return r.deleteRoleCertificate(ctx, role, roleCertSecretName(role))
}

// issueRoleCertificateWhenApplied keeps the role's client certificate
// Secret once the primary applied the role as its spec says, and not
// before: a role the primary refused (or has not seen yet) gets no
// credential, whatever its name. The outcome's message says where the
// certificate is, or that it waits for the apply.
func (r *SQLReconciler) issueRoleCertificateWhenApplied(ctx context.Context, role *tuskv1alpha1.PostgresRole, c *tuskv1alpha1.PostgresCluster, outcome *sqlApply) error {
	if !wantsCertificate(role) {
		return nil
	}
	name := roleCertSecretName(role)
	if outcome.reason != tuskv1alpha1.ReasonApplied {
		outcome.message += fmt.Sprintf("; the client certificate (Secret %s) is issued once the role is applied", name)
		return nil
	}
	err := r.reconcileRoleCertificate(ctx, role, c)
	if se, ok := errors.AsType[*sqlSpecError](err); ok {
		outcome.reason, outcome.retry = se.reason, sqlRetryRefused
		outcome.message = fmt.Sprintf("the role is applied, but its client certificate is not issued: %s", se.msg)
		return nil
	}
	if err != nil {
		return err
	}
	outcome.message += fmt.Sprintf("; its client certificate is in Secret %s", name)
	return nil
}

// reconcileRoleCertificate keeps the role's client certificate Secret. The
// certificate comes from the cluster's client CA, the only CA its
// PostgreSQL trusts client certificates from, so it logs in to this
// cluster alone; its ca.crt is the CA that signed the server's. It names
// no identity: the instance API refuses it whatever its CommonName.
func (r *SQLReconciler) reconcileRoleCertificate(ctx context.Context, role *tuskv1alpha1.PostgresRole, c *tuskv1alpha1.PostgresCluster) error {
	name := roleCertSecretName(role)
	keys, err := r.keys.of(ctx, c)
	if err != nil {
		return err
	}
	serverCA, clientCA := roleCertificateCAs(c, secretData(keys))
	if len(serverCA) == 0 || len(clientCA.CertPEM) == 0 || len(clientCA.KeyPEM) == 0 {
		return sourceErrorf("the PostgresCluster %s has no certificates yet", c.Name)
	}
	existing, err := r.secrets.data(ctx, c.Namespace, name)
	if err != nil {
		return err
	}
	kp, err := keepOrIssue(existing, keyTLSCert, keyTLSKey, clientCA, nil, func() (pki.KeyPair, error) {
		return pki.IssueClient(clientCA, role.Spec.Name, leafValidity, time.Now())
	})
	if err != nil {
		return fmt.Errorf("while issuing the client certificate of role %s: %w", role.Spec.Name, err)
	}
	s := secret(c, name, corev1.SecretTypeTLS, map[string][]byte{keyTLSCert: kp.CertPEM, keyTLSKey: kp.KeyPEM, keyCACert: serverCA})
	err = objectApplier{Client: r.Client, api: r.api}.applyOwned(ctx, role, s)
	if se, ok := asSpecError(err); ok {
		return sourceErrorf("%s", se.message)
	}
	return err
}

// roleCertificateCAs are the CA that signed the cluster's server
// certificate and the CA of its client certificates, from its keys Secret:
// one CA when Tusk made it, two when spec.tls.caSecret names the user's
// (see clusterClientCA).
func roleCertificateCAs(c *tuskv1alpha1.PostgresCluster, caData map[string][]byte) ([]byte, pki.KeyPair) {
	if userCASecret(c) == "" {
		return caData[keyCACert], pki.KeyPair{CertPEM: caData[keyCACert], KeyPEM: caData[keyCAKey]}
	}
	return caData[keyCACert], pki.KeyPair{CertPEM: caData[keyClientCACert], KeyPEM: caData[keyClientCAKey]}
}

// deleteRoleCertificate deletes the role's certificate Secret if the role
// made it; a Secret of that name that is someone else's is left alone.
func (r *SQLReconciler) deleteRoleCertificate(ctx context.Context, role *tuskv1alpha1.PostgresRole, name string) error {
	s := &corev1.Secret{}
	err := r.Get(ctx, types.NamespacedName{Namespace: role.Namespace, Name: name}, s)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("while reading the Secret %s: %w", name, err)
	}
	if !metav1.IsControlledBy(s, role) {
		return nil
	}
	if err := r.Delete(ctx, s); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("while deleting the Secret %s: %w", name, err)
	}
	return nil
}
