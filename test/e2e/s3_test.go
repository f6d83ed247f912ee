//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/pki"
	"tusk.dev/tusk/internal/testenv"
)

// s3Image is the MinIO server image `make e2e` builds and loads
// (hack/images.sh minio): built from the Go module proxy, never pulled.
const s3Image = "tusk/minio:dev"

// s3Server is a MinIO server running as a pod in a test's namespace, with
// TLS from a CA of the test's own: the backup tests reach an object store
// from the instance pods, as users' clusters do, over https with a
// private CA (spec.backup.objectStore.caSecret).
type s3Server struct {
	ns string
	// Bucket exists when startS3 returns.
	Bucket string
	// CredentialsSecret (keys ACCESS_KEY_ID, SECRET_ACCESS_KEY) and
	// CASecret (key ca.crt) are in the namespace, for cluster specs.
	CredentialsSecret, CASecret string
	accessKey, secretKey        string
	caPEM                       []byte
}

const (
	s3Name = "s3"
	s3Port = 9000
)

// startS3 runs MinIO in ns behind the Service s3 and creates a bucket.
func startS3(t *testing.T, ns string) *s3Server {
	t.Helper()
	s := &s3Server{ns: ns, Bucket: "tusk-e2e", CredentialsSecret: "s3-credentials", CASecret: "s3-ca",
		accessKey: "tusk-e2e", secretKey: rand.Text()}
	now := time.Now()
	ca, err := pki.NewCA("tusk e2e S3 CA", 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	host := s3Name + "." + ns + ".svc"
	server, err := pki.IssueServer(ca, host, []string{host, host + ".cluster.local", "localhost"},
		[]net.IP{net.IPv4(127, 0, 0, 1)}, 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	s.caPEM = ca.CertPEM
	createSecret(t, ns, s.CredentialsSecret, map[string][]byte{
		"ACCESS_KEY_ID": []byte(s.accessKey), "SECRET_ACCESS_KEY": []byte(s.secretKey),
	})
	createSecret(t, ns, s.CASecret, map[string][]byte{"ca.crt": ca.CertPEM})
	createSecret(t, ns, "s3-tls", map[string][]byte{"public.crt": server.CertPEM, "private.key": server.KeyPEM})
	createPod(t, ns, s.pod())
	if _, err := clientset.CoreV1().Services(ns).Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: s3Name},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": s3Name},
			Ports:    []corev1.ServicePort{{Name: "https", Port: s3Port, TargetPort: intstr.FromInt32(s3Port)}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the S3 Service: %v", err)
	}
	waitPodReady(t, ns, s3Name, 2*time.Minute)
	s.makeBucket(t)
	return s
}

// pod is MinIO on an emptyDir, under the restricted Pod Security Standard.
func (s *s3Server) pod() *corev1.Pod {
	pod := restrictedPod(s3Name, "/minio", "server", "/data", "--address", fmt.Sprintf(":%d", s3Port),
		"--certs-dir", "/certs", "--quiet")
	pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	c := &pod.Spec.Containers[0]
	c.Image = s3Image
	fromSecret := func(env, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: env, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: s.CredentialsSecret}, Key: key,
		}}}
	}
	c.Env = []corev1.EnvVar{fromSecret("MINIO_ROOT_USER", "ACCESS_KEY_ID"), fromSecret("MINIO_ROOT_PASSWORD", "SECRET_ACCESS_KEY"),
		{Name: "HOME", Value: "/tmp"}}
	c.ReadinessProbe = &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: "/minio/health/live", Port: intstr.FromInt32(s3Port), Scheme: corev1.URISchemeHTTPS,
		}},
		PeriodSeconds: 1,
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes,
		corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		// MinIO reads <certs-dir>/public.crt and private.key, and trusts
		// the CAs/ directory: the CA goes there too, as MinIO looks for it.
		corev1.Volume{Name: "certs", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: "s3-tls",
			Items: []corev1.KeyToPath{{Key: "public.crt", Path: "public.crt"}, {Key: "private.key", Path: "private.key"},
				{Key: "public.crt", Path: "CAs/server.crt"}},
		}}},
	)
	c.VolumeMounts = append(c.VolumeMounts,
		corev1.VolumeMount{Name: "data", MountPath: "/data"},
		corev1.VolumeMount{Name: "tmp", MountPath: "/tmp"},
		corev1.VolumeMount{Name: "certs", MountPath: "/certs", ReadOnly: true},
	)
	return pod
}

// ObjectStore is the spec.backup.objectStore (or a recovery source) of a
// cluster archiving to path in the bucket.
func (s *s3Server) ObjectStore(path string) tuskv1alpha1.ObjectStoreSpec {
	return tuskv1alpha1.ObjectStoreSpec{
		Endpoint: fmt.Sprintf("https://%s.%s.svc:%d", s3Name, s.ns, s3Port),
		Bucket:   s.Bucket,
		Path:     path,
		CredentialsSecret: tuskv1alpha1.S3CredentialsSecret{
			Name: s.CredentialsSecret, AccessKeyIDKey: "ACCESS_KEY_ID", SecretAccessKeyKey: "SECRET_ACCESS_KEY",
		},
		CASecret: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: s.CASecret}, Key: "ca.crt"},
	}
}

// makeBucket creates the bucket through `kubectl port-forward`, which
// reaches the pod on any cluster, not only from the local node.
func (s *s3Server) makeBucket(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, stop := s.forwardedClient(ctx, t)
	defer stop()
	testenv.EventuallyEvery(t, time.Minute, time.Second, func(ctx context.Context) error {
		exists, err := c.BucketExists(ctx, s.Bucket)
		if err != nil || exists {
			return err
		}
		return c.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{})
	})
}

// listKeys lists every object key under prefix in the bucket.
func (s *s3Server) listKeys(t *testing.T, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, stop := s.forwardedClient(ctx, t)
	defer stop()
	var keys []string
	for o := range c.ListObjects(ctx, s.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatalf("listing %s in the e2e S3 server: %v", prefix, o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// forwardedClient forwards a local port to the MinIO pod and returns a
// client through it; stop ends the forward.
func (s *s3Server) forwardedClient(ctx context.Context, t *testing.T) (*minio.Client, func()) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "kubectl", "port-forward", "-n", s.ns, "pod/"+s3Name, fmt.Sprintf("0:%d", s3Port)) // #nosec G204 -- fixed arguments
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting kubectl port-forward: %v", err)
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	// "Forwarding from 127.0.0.1:34567 -> 9000"
	line, err := bufio.NewReader(out).ReadString('\n')
	var port int
	if err == nil {
		_, err = fmt.Sscanf(strings.TrimSpace(line), "Forwarding from 127.0.0.1:%d ->", &port)
	}
	if err != nil {
		stop()
		t.Fatalf("kubectl port-forward to the S3 pod said %q: %v", line, err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.caPEM)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	c, err := minio.New(fmt.Sprintf("127.0.0.1:%d", port), &minio.Options{
		Creds: credentials.NewStaticV4(s.accessKey, s.secretKey, ""), Secure: true, Transport: tr,
	})
	if err != nil {
		stop()
		t.Fatal(err)
	}
	return c, stop
}

func createSecret(t *testing.T, ns, name string, data map[string][]byte) {
	t.Helper()
	if _, err := clientset.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Secret %s: %v", name, err)
	}
}
