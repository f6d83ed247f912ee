package controller

import (
	"context"
	"crypto/rand"
	"net"
	"net/url"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

// Keys of the credential Secrets, ready for applications to mount.
const (
	keyUsername = corev1.BasicAuthUsernameKey
	keyPassword = corev1.BasicAuthPasswordKey
	keyDBName   = "dbname"
	keyHost     = "host"
	keyPort     = "port"
	keyURI      = "uri"
	keyJDBCURI  = "jdbc-uri"
	keyPgpass   = "pgpass"
)

// superuserName is PostgreSQL's superuser; the instance manager logs in as it.
const superuserName = "postgres"

// postgresPort is the port of every instance and Service.
const postgresPort = 5432

// ClientCAPath is where the credential Secrets' URIs expect the cluster's
// CA (the Secret's ca.crt): an application that mounts the Secret at
// /etc/tusk connects with the uri as it is, verifying the server.
const ClientCAPath = "/etc/tusk/ca.crt"

// credentials are one role's login.
type credentials struct {
	username, password, dbname string
}

// reconcileCredentials makes the superuser and application Secrets exist,
// with a generated password unless the user named a Secret of their own,
// and with connection strings derived from the current password, so a
// changed password changes the URIs too.
func (r *ClusterReconciler) reconcileCredentials(ctx context.Context, c *tuskv1alpha1.PostgresCluster, caPEM []byte) error {
	superuser, err := r.login(ctx, c, superuserPasswordSecret(c), superuserSecretName(c), superuserName)
	if err != nil {
		return err
	}
	superuser.dbname = "postgres"
	if err := r.applyOwned(ctx, c, credentialSecret(c, superuserSecretName(c), superuser, caPEM)); err != nil {
		return err
	}
	init := initDB(c)
	app, err := r.login(ctx, c, appPasswordSecret(c), appSecretName(c), init.Owner)
	if err != nil {
		return err
	}
	app.dbname = init.Database
	err = r.applyOwned(ctx, c, credentialSecret(c, appSecretName(c), app, caPEM))
	return err
}

// login reads the password from source (a Secret of the user's, or Tusk's
// own Secret named own), generating one when Tusk's Secret has none yet.
func (r *ClusterReconciler) login(ctx context.Context, c *tuskv1alpha1.PostgresCluster, source, own, defaultUser string) (credentials, error) {
	data, err := r.secrets.data(ctx, c.Namespace, source)
	if err != nil {
		return credentials{}, err
	}
	creds := credentials{username: defaultUser, password: instanceapi.Password(data[keyPassword])}
	if source == own {
		if creds.password == "" {
			creds.password = rand.Text()
		}
		return creds, nil
	}
	if creds.password == "" {
		return credentials{}, userError(tuskv1alpha1.ReasonSecretInvalid, "the Secret %s needs a non-empty %q key", source, keyPassword)
	}
	if u := string(data[keyUsername]); u != "" && u != defaultUser {
		return credentials{}, userError(tuskv1alpha1.ReasonSecretInvalid, "the Secret %s is for user %q, but the role is %q", source, u, defaultUser)
	}
	return creds, nil
}

// credentialSecret builds a Secret with everything a client needs to
// connect through the -rw Service over TLS.
func credentialSecret(c *tuskv1alpha1.PostgresCluster, name string, creds credentials, caPEM []byte) *corev1.Secret {
	host := rwServiceName(c) + "." + c.Namespace + ".svc"
	port := strconv.Itoa(postgresPort)
	uri := url.URL{
		Scheme:   "postgresql",
		User:     url.UserPassword(creds.username, creds.password),
		Host:     net.JoinHostPort(host, port),
		Path:     "/" + creds.dbname,
		RawQuery: url.Values{"sslmode": {"verify-full"}, "sslrootcert": {ClientCAPath}}.Encode(),
	}
	jdbc := url.Values{"user": {creds.username}, "password": {creds.password}, "sslmode": {"verify-full"}, "sslrootcert": {ClientCAPath}}
	return secret(c, name, corev1.SecretTypeBasicAuth, map[string][]byte{
		keyUsername: []byte(creds.username),
		keyPassword: []byte(creds.password),
		keyDBName:   []byte(creds.dbname),
		keyHost:     []byte(host),
		keyPort:     []byte(port),
		keyURI:      []byte(uri.String()),
		keyJDBCURI:  []byte("jdbc:postgresql://" + net.JoinHostPort(host, port) + "/" + creds.dbname + "?" + jdbc.Encode()),
		keyPgpass:   []byte(host + ":" + port + ":" + creds.dbname + ":" + pgpassEscape(creds.username) + ":" + pgpassEscape(creds.password) + "\n"),
		keyCACert:   caPEM,
	})
}

func pgpassEscape(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == ':' || s[i] == '\\' {
			out = append(out, '\\')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// initDB is the cluster's initdb bootstrap, with the API defaults when the
// object came without them.
func initDB(c *tuskv1alpha1.PostgresCluster) tuskv1alpha1.InitDBSpec {
	init := tuskv1alpha1.InitDBSpec{Database: "app", Owner: "app"}
	if c.Spec.Bootstrap != nil && c.Spec.Bootstrap.InitDB != nil {
		init = *c.Spec.Bootstrap.InitDB
		if init.Database == "" {
			init.Database = "app"
		}
		if init.Owner == "" {
			init.Owner = "app"
		}
	}
	return init
}
