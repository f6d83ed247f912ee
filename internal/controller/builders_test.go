package controller

import (
	"flag"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.yaml with the current output")

const testManagerImage = "tusk/operator:test"

// fakeCAPEM stands in for a CA certificate: the builders copy it verbatim.
const fakeCAPEM = "-----BEGIN CERTIFICATE-----\nRkFLRSBDQQ==\n-----END CERTIFICATE-----\n"

// defaultCluster is a cluster as the API server stores it when the user
// gave only the required fields: the CRD defaults filled in.
func defaultCluster() *tuskv1alpha1.PostgresCluster {
	return &tuskv1alpha1.PostgresCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "pg", Namespace: "db", UID: "0b5e1c6a-1111-2222-3333-444455556666"},
		Spec: tuskv1alpha1.PostgresClusterSpec{
			Instances: 1,
			Image:     "postgres:17",
			Storage:   tuskv1alpha1.StorageSpec{Size: resource.MustParse("1Gi"), ReclaimPolicy: tuskv1alpha1.ReclaimRetain},
			PostgreSQL: tuskv1alpha1.PostgreSQLSpec{Synchronous: tuskv1alpha1.SynchronousSpec{
				Mode: tuskv1alpha1.SynchronousQuorum, Number: 1, WhenTooFewStandbys: tuskv1alpha1.StandbyShortageDegrade,
			}},
			Bootstrap: &tuskv1alpha1.BootstrapSpec{InitDB: &tuskv1alpha1.InitDBSpec{Database: "app", Owner: "app"}},
		},
	}
}

// customCluster sets everything a user can set about the pods and volumes.
func customCluster() *tuskv1alpha1.PostgresCluster {
	c := defaultCluster()
	c.Name = "orders"
	c.Spec.Instances = 3
	c.Spec.Image = "registry.example/postgres:17.2"
	c.Spec.ImagePullPolicy = corev1.PullAlways
	c.Spec.Storage.Size = resource.MustParse("20Gi")
	c.Spec.Storage.StorageClassName = ptr.To("fast-ssd")
	c.Spec.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
	}
	c.Spec.Affinity = &corev1.Affinity{
		NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: "node-role.example/db", Operator: corev1.NodeSelectorOpExists,
			}}}},
		}},
		PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight: 10, PodAffinityTerm: corev1.PodAffinityTerm{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "batch"}},
				TopologyKey:   "topology.kubernetes.io/zone",
			},
		}}},
	}
	c.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "db", Effect: corev1.TaintEffectNoSchedule}}
	c.Spec.PriorityClassName = "database"
	c.Spec.SuperuserSecret = &corev1.LocalObjectReference{Name: "orders-root"}
	c.Spec.Bootstrap.InitDB = &tuskv1alpha1.InitDBSpec{Database: "orders", Owner: "shop", Secret: &corev1.LocalObjectReference{Name: "shop-login"}}
	c.Spec.Monitoring = &tuskv1alpha1.MonitoringSpec{Probe: &tuskv1alpha1.ProbeSpec{Interval: &metav1.Duration{Duration: 2 * time.Second}, Objective: "99.95"}}
	c.Spec.NetworkPolicy = &tuskv1alpha1.NetworkPolicySpec{
		PostgresFrom: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "shop"}}}},
		MetricsFrom: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
			MatchLabels: map[string]string{corev1.LabelMetadataName: "monitoring"}}}},
	}
	return c
}

// backupCluster archives WAL to a store with a private CA, with key names
// of its own in the credentials Secret and no path (so: the cluster's name).
func backupCluster() *tuskv1alpha1.PostgresCluster {
	c := defaultCluster()
	c.Name = "archived"
	c.Spec.Backup = &tuskv1alpha1.BackupSpec{Target: tuskv1alpha1.BackupTargetPreferReplica, ObjectStore: tuskv1alpha1.ObjectStoreSpec{
		Endpoint: "https://s3.example.com", Bucket: "backups", Region: "eu-west-1",
		CredentialsSecret: tuskv1alpha1.S3CredentialsSecret{Name: "s3-creds", AccessKeyIDKey: "id", SecretAccessKeyKey: "secret"},
		CASecret:          &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s3-ca"}, Key: "bundle.pem"},
	}}
	return c
}

// golden compares v, as YAML, with testdata/<name>.golden.yaml, or rewrites
// the file when the tests run with -update.
func golden(t *testing.T, name string, v any) {
	t.Helper()
	got, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", name+".golden.yaml")
	if *update {
		if err := os.MkdirAll("testdata", 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/controller -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from %s (run go test ./internal/controller -update and review the diff):\n--- got\n%s", name, path, got)
	}
}

func TestBuildersGolden(t *testing.T) {
	for name, c := range map[string]*tuskv1alpha1.PostgresCluster{"default": defaultCluster(), "custom": customCluster()} {
		t.Run(name, func(t *testing.T) {
			golden(t, name+"-pod-primary", instancePod(c, instanceName(c.Name, 1), instanceapi.RolePrimary, testManagerImage))
			golden(t, name+"-pod-replica", instancePod(c, instanceName(c.Name, 2), instanceapi.RoleReplica, testManagerImage))
			golden(t, name+"-pvc", instancePVC(c, instanceName(c.Name, 1)))
			golden(t, name+"-services", clusterServices(c, ""))
			golden(t, name+"-pdb", clusterPDB(c))
			golden(t, name+"-networkpolicy", clusterNetworkPolicy(c, "tusk-system"))
			golden(t, name+"-probe", probeDeployment(c, testManagerImage))
			creds := credentials{username: "app", password: "p@ss:w/rd?&", dbname: "app"}
			golden(t, name+"-secret", readable(credentialSecret(c, appSecretName(c), creds, []byte(fakeCAPEM))))
		})
	}
	// The operator's namespace unknown (run outside the cluster): its pods
	// in any namespace.
	golden(t, "default-networkpolicy-any-operator-namespace", clusterNetworkPolicy(defaultCluster(), ""))
	c := backupCluster()
	golden(t, "backup-pod-primary", instancePod(c, instanceName(c.Name, 1), instanceapi.RolePrimary, testManagerImage))
	golden(t, "backup-pod-replica", instancePod(c, instanceName(c.Name, 2), instanceapi.RoleReplica, testManagerImage))
}

// readable shows a Secret's data as text in golden files, for review.
func readable(s *corev1.Secret) *corev1.Secret {
	out := s.DeepCopy()
	out.StringData = map[string]string{}
	for k, v := range out.Data {
		out.StringData[k] = string(v)
	}
	out.Data = nil
	return out
}

// TestPodPassesRestrictedPSS checks what the restricted Pod Security
// Standard asks of every container, and a read-only root filesystem.
func TestPodPassesRestrictedPSS(t *testing.T) {
	for _, c := range []*tuskv1alpha1.PostgresCluster{defaultCluster(), customCluster(), backupCluster()} {
		checkRestricted(t, c.Name, instancePod(c, instanceName(c.Name, 1), instanceapi.RolePrimary, testManagerImage).Spec)
		checkRestricted(t, c.Name+"-probe", probeDeployment(c, testManagerImage).Spec.Template.Spec)
	}
}

func checkRestricted(t *testing.T, name string, spec corev1.PodSpec) {
	t.Helper()
	c := struct{ Name string }{name}
	pod := corev1.Pod{Spec: spec}
	{
		psc := pod.Spec.SecurityContext
		if psc == nil || !ptr.Deref(psc.RunAsNonRoot, false) || psc.SeccompProfile == nil ||
			psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: pod security context %+v: want runAsNonRoot and seccomp RuntimeDefault", c.Name, psc)
		}
		if pod.Spec.HostNetwork || pod.Spec.HostPID || pod.Spec.HostIPC {
			t.Errorf("%s: the pod shares a host namespace", c.Name)
		}
		for _, v := range pod.Spec.Volumes {
			if v.HostPath != nil {
				t.Errorf("%s: volume %s is a hostPath", c.Name, v.Name)
			}
		}
		for _, ctr := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
			sc := ctr.SecurityContext
			switch {
			case sc == nil:
				t.Errorf("%s/%s: no security context", c.Name, ctr.Name)
			case !ptr.Deref(sc.RunAsNonRoot, false), ptr.Deref(sc.AllowPrivilegeEscalation, true),
				ptr.Deref(sc.Privileged, false), !ptr.Deref(sc.ReadOnlyRootFilesystem, false),
				sc.Capabilities == nil, len(sc.Capabilities.Add) > 0,
				len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL",
				sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
				t.Errorf("%s/%s: security context %+v is not restricted", c.Name, ctr.Name, sc)
			}
			if sc != nil && sc.RunAsUser != nil && *sc.RunAsUser == 0 {
				t.Errorf("%s/%s: runs as root", c.Name, ctr.Name)
			}
			for _, p := range ctr.Ports {
				if p.HostPort != 0 {
					t.Errorf("%s/%s: host port %d", c.Name, ctr.Name, p.HostPort)
				}
			}
		}
	}
}

// TestPodMountsWhatItsArgumentsReference: every path the containers are
// told about lies under a volume mount of that container, and every mount
// names a volume of the pod.
func TestPodMountsWhatItsArgumentsReference(t *testing.T) {
	for _, c := range []*tuskv1alpha1.PostgresCluster{defaultCluster(), customCluster(), backupCluster()} {
		pod := instancePod(c, instanceName(c.Name, 1), instanceapi.RolePrimary, testManagerImage)
		volumes := map[string]corev1.Volume{}
		for _, v := range pod.Spec.Volumes {
			volumes[v.Name] = v
		}
		for _, ctr := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
			var paths []string
			for _, arg := range ctr.Command {
				if i := strings.Index(arg, "="); i >= 0 {
					arg = arg[i+1:]
				}
				if strings.HasPrefix(arg, "/") && arg != "/tusk" { // /tusk is the operator image's own binary
					paths = append(paths, arg)
				}
			}
			for _, e := range ctr.Env {
				if strings.HasPrefix(e.Value, "/") {
					paths = append(paths, e.Value)
				}
			}
			for _, p := range paths {
				if !mounted(ctr, p) {
					t.Errorf("%s/%s: %s is not under any volume mount", c.Name, ctr.Name, p)
				}
			}
			for _, m := range ctr.VolumeMounts {
				if _, ok := volumes[m.Name]; !ok {
					t.Errorf("%s/%s: mount %s names no volume of the pod", c.Name, ctr.Name, m.Name)
				}
			}
		}
		wantSecrets := map[string]string{
			"superuser": superuserPasswordSecret(c), "app": appPasswordSecret(c),
			"server-tls": serverSecretName(c), "replication-tls": replicationSecretName(c),
		}
		for vol, secret := range wantSecrets {
			if v := volumes[vol]; v.Secret == nil || v.Secret.SecretName != secret {
				t.Errorf("%s: volume %s is %+v, want Secret %s", c.Name, vol, v.VolumeSource, secret)
			}
		}
		if v := volumes["pgdata"]; v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != pod.Name {
			t.Errorf("%s: pgdata is %+v, want the PVC %s", c.Name, v.VolumeSource, pod.Name)
		}
	}
}

func mounted(ctr corev1.Container, path string) bool {
	for _, m := range ctr.VolumeMounts {
		if path == m.MountPath || strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			return true
		}
	}
	return false
}

func TestCredentialSecretEscapesPassword(t *testing.T) {
	const password = `p@ss:w/rd?&`
	c := defaultCluster()
	s := credentialSecret(c, appSecretName(c), credentials{username: "app", password: password, dbname: "app"}, []byte(fakeCAPEM))
	if s.Type != corev1.SecretTypeBasicAuth {
		t.Errorf("type %s, want %s", s.Type, corev1.SecretTypeBasicAuth)
	}
	u, err := url.Parse(string(s.Data[keyURI]))
	if err != nil {
		t.Fatalf("uri %q: %v", s.Data[keyURI], err)
	}
	if got, _ := u.User.Password(); got != password || u.User.Username() != "app" {
		t.Errorf("uri %q gives user %q password %q, want app %q", s.Data[keyURI], u.User.Username(), got, password)
	}
	if u.Hostname() != "pg-rw.db.svc" || u.Port() != "5432" || u.Path != "/app" {
		t.Errorf("uri %q: wrong host, port or database", s.Data[keyURI])
	}
	// The server is verified, against the CA where the Secret is mounted.
	if q := u.Query(); q.Get("sslmode") != "verify-full" || q.Get("sslrootcert") != ClientCAPath {
		t.Errorf("uri %q: want sslmode=verify-full and sslrootcert=%s", s.Data[keyURI], ClientCAPath)
	}

	jdbc := strings.TrimPrefix(string(s.Data[keyJDBCURI]), "jdbc:")
	ju, err := url.Parse(jdbc)
	if err != nil {
		t.Fatalf("jdbc-uri %q: %v", s.Data[keyJDBCURI], err)
	}
	if q := ju.Query(); q.Get("password") != password || q.Get("user") != "app" || ju.Path != "/app" {
		t.Errorf("jdbc-uri %q gives user %q password %q", s.Data[keyJDBCURI], q.Get("user"), q.Get("password"))
	}
	if q := ju.Query(); q.Get("sslmode") != "verify-full" || q.Get("sslrootcert") != ClientCAPath {
		t.Errorf("jdbc-uri %q: want sslmode=verify-full and sslrootcert=%s", s.Data[keyJDBCURI], ClientCAPath)
	}

	if got, want := string(s.Data[keyPgpass]), `pg-rw.db.svc:5432:app:app:p@ss\:w/rd?&`+"\n"; got != want {
		t.Errorf("pgpass %q, want %q", got, want)
	}
	if got, want := pgpassEscape(`a:b\c`), `a\:b\\c`; got != want {
		t.Errorf("pgpassEscape: %q, want %q", got, want)
	}
	for _, key := range []string{keyUsername, keyPassword, keyDBName, keyHost, keyPort, keyURI, keyJDBCURI, keyPgpass, keyCACert} {
		if len(s.Data[key]) == 0 {
			t.Errorf("key %s is empty", key)
		}
	}
}

// TestLeaseArgs: Lease timings in the spec reach the instance manager,
// with the fence margin at 1.5 renewal intervals; without them the pods
// keep the manager's defaults and do not change.
func TestLeaseArgs(t *testing.T) {
	if got := leaseArgs(nil); got != nil {
		t.Fatalf("leaseArgs(nil) = %v, want none", got)
	}
	ha := &tuskv1alpha1.HighAvailabilitySpec{
		LeaseDuration: metav1.Duration{Duration: 4e9}, LeaseRenewInterval: metav1.Duration{Duration: 1e9},
	}
	want := "--lease-duration=4s --lease-renew-every=1s --lease-fence-margin=1.5s"
	if got := strings.Join(leaseArgs(ha), " "); got != want {
		t.Fatalf("leaseArgs = %s, want %s", got, want)
	}
	c := defaultCluster()
	c.Spec.HighAvailability = ha
	if args := strings.Join(instanceArgs(c), " "); !strings.Contains(args, want) {
		t.Fatalf("the instance manager's arguments lack the Lease timings: %s", args)
	}
}
