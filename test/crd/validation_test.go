//go:build integration

package crd

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	var err error
	if env, err = testenv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping envtest:", err)
	}
	os.Exit(code)
}

// newNamespace creates a namespace of the test's own.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "crd-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

const baseCluster = `
apiVersion: tusk.dev/v1alpha1
kind: PostgresCluster
metadata: {name: pg}
spec:
  instances: 3
  image: postgres:17
  storage: {size: 1Gi}
`

// object parses YAML and applies an overlay to it with JSON merge patch
// rules (maps merge, null deletes, anything else replaces), the way a user's
// edit of one field changes a manifest.
func object(t *testing.T, base, overlay string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(base), &u.Object); err != nil {
		t.Fatal(err)
	}
	var patch map[string]any
	if err := yaml.Unmarshal([]byte(overlay), &patch); err != nil {
		t.Fatal(err)
	}
	mergePatch(u.Object, patch)
	return u
}

func mergePatch(dst, patch map[string]any) {
	for k, v := range patch {
		sub, isMap := v.(map[string]any)
		switch existing, ok := dst[k].(map[string]any); {
		case v == nil:
			delete(dst, k)
		case isMap && ok:
			mergePatch(existing, sub)
		default:
			dst[k] = v
		}
	}
}

func expectRejected(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted, want rejection with %q", want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("rejected with\n  %v\nwant a message containing\n  %q", err, want)
	}
}

func TestInvalidClustersAreRejectedOnCreate(t *testing.T) {
	ns := newNamespace(t)
	cases := []struct {
		name, overlay, want string
	}{
		{"no instances", `spec: {instances: 0}`, "should be greater than or equal to 1"},
		{"no storage", `spec: {storage: null}`, "spec.storage: Required value"},
		{"empty storage", `spec: {storage: {size: "0"}}`, "storage.size must be greater than zero"},
		{"two bootstrap methods", `spec: {bootstrap: {initdb: {}, clone: {cluster: other}}}`, "bootstrap needs exactly one of initdb, recovery or clone"},
		{"synchronous quorum as large as instances", `spec: {postgresql: {synchronous: {number: 3}}}`, "postgresql.synchronous.number must be less than instances"},
		{"unknown synchronous mode", `spec: {postgresql: {synchronous: {mode: sync}}}`, `Unsupported value: "sync"`},
		{"reserved parameter", `spec: {postgresql: {parameters: {port: "5433"}}}`, "parameter port is managed by Tusk and cannot be set: Tusk sets it itself to keep Services, replication, failover, archiving, TLS and logging working"},
		{"parameter in capitals", `spec: {postgresql: {parameters: {Archive_Command: "/bin/true"}}}`, "parameter names are PostgreSQL setting names in lowercase"},
		{"several reserved parameters", `spec: {postgresql: {parameters: {listen_addresses: "*", primary_conninfo: "host=x", work_mem: 4MB}}}`, "parameter listen_addresses is managed by Tusk"},
		{"malformed parameter name", `spec: {postgresql: {parameters: {"max connections": "10"}}}`, "parameter names are PostgreSQL setting names"},
		{"wal_level too low for replicas", `spec: {postgresql: {parameters: {wal_level: minimal}}}`, "wal_level must be replica or logical"},
		// A line break would start a setting nobody asked for; once stored
		// it broke every restart, demote and promote (issue 21).
		{"line break in a parameter value", `spec: {postgresql: {parameters: {work_mem: "4MB\nshared_preload_libraries = evil"}}}`, "parameter values cannot contain line breaks or NUL"},
		{"carriage return in a parameter value", `spec: {postgresql: {parameters: {work_mem: "4MB\rx"}}}`, "parameter values cannot contain line breaks or NUL"},
		{"NUL in a parameter value", `spec: {postgresql: {parameters: {work_mem: "4MB\0"}}}`, "parameter values cannot contain line breaks or NUL"},
		{"huge parameter value", `spec: {postgresql: {parameters: {search_path: "` + strings.Repeat("x", 5000) + `"}}}`, "spec.postgresql.parameters.search_path: Too long: may not be more than 4096 bytes"},
		{"system database for the app", `spec: {bootstrap: {initdb: {database: postgres}}}`, "must be an application database"},
		{"superuser as app owner", `spec: {bootstrap: {initdb: {owner: postgres}}}`, "bootstrap.initdb.owner must be an ordinary role"},
		{"import without a CA to verify the source", `spec: {bootstrap: {initdb: {import: {source: {host: db.example.com, user: m, passwordSecret: {name: s, key: pw}}, databases: [shop]}}}}`,
			"bootstrap.initdb.import.source.caSecret is required with sslMode verify-ca or verify-full"},
		{"import from a host and a cluster", `spec: {bootstrap: {initdb: {import: {source: {host: db, cluster: old, user: m, passwordSecret: {name: s, key: pw}}, databases: [shop]}}}}`,
			"bootstrap.initdb.import.source needs exactly one of host (a server anywhere) or cluster (a Tusk cluster of this namespace)"},
		{"import from nowhere", `spec: {bootstrap: {initdb: {import: {source: {user: m, sslMode: require, passwordSecret: {name: s, key: pw}}, databases: [shop]}}}}`,
			"bootstrap.initdb.import.source needs exactly one of host"},
		{"import from a cluster name that is no name", `spec: {bootstrap: {initdb: {import: {source: {cluster: Old.One, user: m, passwordSecret: {name: s, key: pw}}, databases: [shop]}}}}`,
			"spec.bootstrap.initdb.import.source.cluster in body should match"},
		{"import of a system database", `spec: {bootstrap: {initdb: {import: {source: {host: db, user: m, sslMode: require, passwordSecret: {name: s, key: pw}}, databases: [shop, template1]}}}}`,
			"bootstrap.initdb.import.databases lists application databases"},
		{"import of a database name with a line break", `spec: {bootstrap: {initdb: {import: {source: {host: db, user: m, sslMode: require, passwordSecret: {name: s, key: pw}}, databases: ["shop\nx"]}}}}`,
			"a database name has no control character"},
		{"import of no database", `spec: {bootstrap: {initdb: {import: {source: {host: db, user: m, sslMode: require, passwordSecret: {name: s, key: pw}}, databases: []}}}}`,
			"spec.bootstrap.initdb.import.databases: Invalid value: 0: spec.bootstrap.initdb.import.databases in body should have at least 1 items"},
		{"import with an unknown sslmode", `spec: {bootstrap: {initdb: {import: {source: {host: db, user: m, sslMode: prefer, passwordSecret: {name: s, key: pw}}, databases: [shop]}}}}`,
			`Unsupported value: "prefer"`},
		{"recovery from nothing", `spec: {bootstrap: {recovery: {}}}`, "bootstrap.recovery needs exactly one of backup"},
		{"two recovery targets", `spec: {bootstrap: {recovery: {backup: {name: b}, target: {time: "2026-01-01T00:00:00Z", lsn: "0/3000060"}}}}`, "a recovery target is one of time, lsn or name"},
		{"recovery source without a path", `spec: {bootstrap: {recovery: {source: {endpoint: "https://s3", bucket: b1b, credentialsSecret: {name: s}}}}}`, "bootstrap.recovery.source.path is required"},
		{"malformed recovery LSN", `spec: {bootstrap: {recovery: {backup: {name: b}, target: {lsn: "3000060"}}}}`, "spec.bootstrap.recovery.target.lsn"},
		{"name too long", `metadata: {name: a-very-long-cluster-name-that-leaves-no-room-for-pods}`, "a PostgresCluster name is at most 50 characters"},
		// Valid object names that can never name a Service.
		{"name with a dot", `metadata: {name: orders.eu}`, "a PostgresCluster name starts with a lowercase letter and has only lowercase letters, digits and '-' (no dots)"},
		{"name with a leading digit", `metadata: {name: 1orders}`, "a PostgresCluster name starts with a lowercase letter"},
		{"retention in words", `spec: {backup: {objectStore: {endpoint: "https://s3", bucket: b1b, credentialsSecret: {name: s}}, retention: 7 days}}`, "spec.backup.retention"},
		{"schedule that is not cron", `spec: {backup: {objectStore: {endpoint: "https://s3", bucket: b1b, credentialsSecret: {name: s}}, schedule: daily}}`, "spec.backup.schedule"},
		{"lease renewed too seldom", `spec: {highAvailability: {leaseDuration: 4s, leaseRenewInterval: 3s}}`, "leaseRenewInterval must be at most half of leaseDuration"},
		{"lease renewal left at 2s for a 3s lease", `spec: {highAvailability: {leaseDuration: 3s}}`, "leaseRenewInterval must be at most half of leaseDuration"},
		{"lease in fractions of a second", `spec: {highAvailability: {leaseDuration: 4500ms, leaseRenewInterval: 1s}}`, "leaseDuration must be whole seconds from 2s to 60s"},
		{"lease too long", `spec: {highAvailability: {leaseDuration: 2m}}`, "leaseDuration must be whole seconds from 2s to 60s"},
		{"lease renewed too often", `spec: {highAvailability: {leaseDuration: 4s, leaseRenewInterval: 100ms}}`, "leaseRenewInterval must be at least 500ms"},
		{"probe too often", `spec: {monitoring: {probe: {interval: 500ms}}}`, "monitoring.probe.interval must be from 1s to 60s"},
		{"probe objective as a ratio", `spec: {monitoring: {probe: {objective: "0.999"}}}`, `monitoring.probe.objective must be a percentage from 90 to 99.999, such as "99.9"`},
		{"probe objective of 100", `spec: {monitoring: {probe: {objective: "100"}}}`, "monitoring.probe.objective must be a percentage"},
		{"probe objective with a sign", `spec: {monitoring: {probe: {objective: "99.9%"}}}`, "monitoring.probe.objective must be a percentage"},
		{"negative slow statement threshold", `spec: {postgresql: {logging: {slowStatementThreshold: -1s}}}`, "postgresql.logging.slowStatementThreshold must be a duration from 0s (every statement) to 24h"},
		{"slow statement threshold of days", `spec: {postgresql: {logging: {slowStatementThreshold: 48h}}}`, "postgresql.logging.slowStatementThreshold must be a duration from 0s (every statement) to 24h"},
		{"no lock wait threshold", `spec: {postgresql: {logging: {lockWaitThreshold: 0s}}}`, "postgresql.logging.lockWaitThreshold must be a duration from 1ms to 1h"},
		{"slow statements set twice", `spec: {postgresql: {parameters: {log_min_duration_statement: "1s"}, logging: {slowStatementThreshold: 500ms}}}`, "postgresql.logging and postgresql.parameters both set log_min_duration_statement, log_lock_waits or deadlock_timeout: set each in one place only"},
		{"lock waits set twice", `spec: {postgresql: {parameters: {log_lock_waits: "on"}, logging: {lockWaits: false}}}`, "postgresql.logging and postgresql.parameters both set"},
		{"endpoint without scheme", `spec: {backup: {objectStore: {endpoint: "s3.example.com", bucket: b1b, credentialsSecret: {name: s}}}}`, "spec.backup.objectStore.endpoint"},
		// Hostile or odd input in every string field: refused here, before
		// the operator or a pod ever sees it.
		{"too many instances", `spec: {instances: 17}`, "spec.instances in body should be less than or equal to 16"},
		{"empty image", `spec: {image: ""}`, "spec.image in body should be at least 1 chars long"},
		{"image with a line break", `spec: {image: "postgres:17\nevil"}`, "spec.image in body should match"},
		{"image with a space", `spec: {image: "postgres:17 --evil"}`, "spec.image in body should match"},
		{"huge image", `spec: {image: "` + strings.Repeat("x", 5000) + `"}`, "spec.image: Too long: may not be more than 512 bytes"},
		{"unknown pull policy", `spec: {imagePullPolicy: Sometimes}`, `spec.imagePullPolicy: Unsupported value: "Sometimes"`},
		{"SQL in the database name", `spec: {bootstrap: {initdb: {database: "app; DROP DATABASE postgres"}}}`, "spec.bootstrap.initdb.database in body should match"},
		{"quote in the owner", `spec: {bootstrap: {initdb: {owner: 'a"b'}}}`, "spec.bootstrap.initdb.owner in body should match"},
		{"unicode database name", `spec: {bootstrap: {initdb: {database: "ünï"}}}`, "spec.bootstrap.initdb.database in body should match"},
		{"initdb Secret that no Secret can be named", `spec: {bootstrap: {initdb: {secret: {name: "../etc"}}}}`, "must name a Secret of the namespace"},
		{"clone of a path", `spec: {bootstrap: {clone: {cluster: "../x"}}}`, "spec.bootstrap.clone.cluster in body should match"},
		{"clone of nothing", `spec: {bootstrap: {clone: {cluster: ""}}}`, "spec.bootstrap.clone.cluster in body should be at least 1 chars long"},
		{"recovery from an unnamed backup", `spec: {bootstrap: {recovery: {backup: {name: ""}}}}`, "must name a PostgresBackup of the namespace"},
		{"recovery time in words", `spec: {bootstrap: {recovery: {backup: {name: b}, target: {time: "yesterday"}}}}`, "spec.bootstrap.recovery.target.time in body must be of type date-time"},
		{"huge restore point name", `spec: {bootstrap: {recovery: {backup: {name: b}, target: {name: "` + strings.Repeat("n", 100) + `"}}}}`, "spec.bootstrap.recovery.target.name: Too long"},
		{"superuser Secret with no name", `spec: {superuserSecret: {name: ""}}`, "must name a Secret of the namespace"},
		{"superuser Secret as a path", `spec: {superuserSecret: {name: "../etc"}}`, "must name a Secret of the namespace"},
		{"CA Secret with no name", `spec: {tls: {caSecret: {name: ""}}}`, "must name a Secret of the namespace"},
		{"storage class with a line break", `spec: {storage: {size: 1Gi, storageClassName: "a\nb"}}`, "spec.storage.storageClassName in body should match"},
		{"negative storage", `spec: {storage: {size: "-1Gi"}}`, "storage.size must be greater than zero"},
		{"root as the postgres user", `spec: {postgresUID: 0}`, "spec.postgresUID in body should be greater than or equal to 1"},
		{"priority class with a space", `spec: {priorityClassName: "A B"}`, "spec.priorityClassName in body should match"},
		{"negative synchronous number", `spec: {postgresql: {synchronous: {number: -1}}}`, "spec.postgresql.synchronous.number in body should be greater than or equal to 1"},
		{"parameter with two dots", `spec: {postgresql: {parameters: {"a.b.c": "1"}}}`, "one '.' (for extension settings)"},
		{"bucket in capitals", `spec: {backup: {objectStore: {endpoint: "https://s3", bucket: BAD, credentialsSecret: {name: s}}}}`, "spec.backup.objectStore.bucket in body should match"},
		{"path from the root", `spec: {backup: {objectStore: {endpoint: "https://s3", bucket: b1b, path: "/x", credentialsSecret: {name: s}}}}`, "spec.backup.objectStore.path in body should match"},
		{"path climbing out", `spec: {backup: {objectStore: {endpoint: "https://s3", bucket: b1b, path: "a/../../b", credentialsSecret: {name: s}}}}`, "no '.' or '..' segments"},
		{"path with a line break", `spec: {backup: {objectStore: {endpoint: "https://s3", bucket: b1b, path: "a\nb", credentialsSecret: {name: s}}}}`, "spec.backup.objectStore"},
		{"endpoint with a line break", `spec: {backup: {objectStore: {endpoint: "https://s3\nx", bucket: b1b, credentialsSecret: {name: s}}}}`, "spec.backup.objectStore.endpoint in body should match"},
		{"endpoint on the file system", `spec: {backup: {objectStore: {endpoint: "file:///etc", bucket: b1b, credentialsSecret: {name: s}}}}`, "spec.backup.objectStore.endpoint in body should match"},
		{"credentials Secret with no name", `spec: {backup: {objectStore: {endpoint: "https://s3", bucket: b1b, credentialsSecret: {name: ""}}}}`, "spec.backup.objectStore.credentialsSecret.name in body should be at least 1 chars long"},
		{"credentials key with a line break", `spec: {backup: {objectStore: {endpoint: "https://s3", bucket: b1b, credentialsSecret: {name: s, accessKeyIDKey: "a\nb"}}}}`, "spec.backup.objectStore.credentialsSecret.accessKeyIDKey in body should match"},
		{"no retention at all", `spec: {backup: {objectStore: {endpoint: "https://s3", bucket: b1b, credentialsSecret: {name: s}}, retention: 0d}}`, "spec.backup.retention in body should match"},
		{"unknown backup target", `spec: {backup: {objectStore: {endpoint: "https://s3", bucket: b1b, credentialsSecret: {name: s}}, target: standby}}`, `spec.backup.target: Unsupported value: "standby"`},
		{"too many NetworkPolicy peers", `spec: {networkPolicy: {postgresFrom: [` + strings.Repeat(`{podSelector: {}},`, 40) + `{podSelector: {}}]}}`, "spec.networkPolicy.postgresFrom: Too many: 41: must have at most 32 items"},
	}
	if len(cases) < 50 {
		t.Errorf("%d bad inputs; the table keeps at least 50", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := object(t, baseCluster, tc.overlay)
			obj.SetNamespace(ns)
			expectRejected(t, env.Client.Create(context.Background(), obj), tc.want)
		})
	}
}

// TestLoggingIsAccepted: the logging block as docs/api.md shows it, and
// parameters that do not overlap it.
func TestLoggingIsAccepted(t *testing.T) {
	createCluster(t, `spec: {postgresql: {parameters: {log_temp_files: "0"}, logging: {slowStatementThreshold: 250ms, lockWaits: true, lockWaitThreshold: 200ms}}}`)
	createCluster(t, `spec: {postgresql: {logging: {slowStatementThreshold: 0s}}}`)
}

// createCluster creates baseCluster with overlay applied in a new namespace.
func createCluster(t *testing.T, overlay string) *unstructured.Unstructured {
	t.Helper()
	obj := object(t, baseCluster, overlay)
	obj.SetNamespace(newNamespace(t))
	if err := env.Client.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating the base cluster: %v", err)
	}
	return obj
}

func mergePatchObject(obj client.Object, patch string) error {
	data, err := yaml.YAMLToJSON([]byte(patch))
	if err != nil {
		return err
	}
	return env.Client.Patch(context.Background(), obj, client.RawPatch(types.MergePatchType, data))
}

func TestClusterUpdates(t *testing.T) {
	cases := []struct {
		name, base, patch, want string // want "" means accepted
	}{
		{"storage grows", ``, `spec: {storage: {size: 2Gi}}`, ""},
		{"storage shrinks", `spec: {storage: {size: 10Gi}}`, `spec: {storage: {size: 5Gi}}`, "storage.size cannot shrink"},
		{"storage shrinks in other units", `spec: {storage: {size: 1Gi}}`, `spec: {storage: {size: 1000Mi}}`, "storage.size cannot shrink"},
		{"app database renamed", ``, `spec: {bootstrap: {initdb: {database: other}}}`, "bootstrap cannot change after the cluster is created"},
		{"bootstrap method switched", ``, `spec: {bootstrap: {initdb: null, clone: {cluster: other}}}`, "bootstrap cannot change after the cluster is created"},
		{"minor image update", ``, `spec: {image: "postgres:17.2-bookworm"}`, ""},
		{"older major", ``, `spec: {image: "postgres:16"}`, "image cannot go to an older PostgreSQL major version"},
		{"older major behind a registry port", `spec: {image: "registry:5000/pg/postgres:18.1"}`, `spec: {image: "registry:5000/pg/postgres:17@sha256:abc"}`, "image cannot go to an older PostgreSQL major version"},
		{"older major by number, not by text", `spec: {image: "postgres:10"}`, `spec: {image: "postgres:9"}`, "image cannot go to an older PostgreSQL major version"},
		{"newer major starts an upgrade", ``, `spec: {image: "postgres:18"}`, ""},
		{"newer major by number, not by text", `spec: {image: "postgres:9.6"}`, `spec: {image: "postgres:10"}`, ""},
		{"newer major behind a registry port", `spec: {image: "registry:5000/pg/postgres:17.2"}`, `spec: {image: "registry:5000/pg/postgres:18@sha256:abc"}`, ""},
		{"upgrade mode", ``, `spec: {upgrade: {mode: copy}}`, ""},
		{"unknown upgrade mode", ``, `spec: {upgrade: {mode: move}}`, "Unsupported value: \"move\""},
		{"image without a version tag", ``, `spec: {image: "postgres@sha256:0123abc"}`, ""},
		{"parameters change", ``, `spec: {postgresql: {parameters: {work_mem: 8MB}}}`, ""},
		{"reserved parameter added later", ``, `spec: {postgresql: {parameters: {data_directory: /tmp}}}`, "parameter data_directory is managed by Tusk"},
		{"too few instances for the quorum", `spec: {postgresql: {synchronous: {number: 2}}}`, `spec: {instances: 2}`, "postgresql.synchronous.number must be less than instances"},
		{"one instance needs no quorum", `spec: {postgresql: {synchronous: {number: 2}}}`, `spec: {instances: 1}`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := createCluster(t, tc.base)
			err := mergePatchObject(obj, tc.patch)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				return
			}
			expectRejected(t, err, tc.want)
		})
	}
}

func scaleTo(t *testing.T, obj client.Object, replicas int32) error {
	t.Helper()
	scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: replicas}}
	return env.Client.SubResource("scale").Update(context.Background(), obj, client.WithSubResourceBody(scale))
}

func TestScaleSubresource(t *testing.T) {
	ctx := context.Background()
	obj := createCluster(t, `spec: {instances: 1}`)
	if err := scaleTo(t, obj, 5); err != nil {
		t.Fatalf("scaling to 5: %v", err)
	}
	got := &tuskv1alpha1.PostgresCluster{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Instances != 5 {
		t.Fatalf("spec.instances = %d after scaling to 5", got.Spec.Instances)
	}
	expectRejected(t, scaleTo(t, obj, 0), "greater than or equal to 1")
}

func TestDefaults(t *testing.T) {
	obj := object(t, `
apiVersion: tusk.dev/v1alpha1
kind: PostgresCluster
metadata: {name: minimal}
spec: {storage: {size: 1Gi}}
`, `{}`)
	obj.SetNamespace(newNamespace(t))
	if err := env.Client.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	got := &tuskv1alpha1.PostgresCluster{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), got); err != nil {
		t.Fatal(err)
	}
	s := got.Spec
	checks := map[string][2]any{
		"instances":                        {s.Instances, int32(1)},
		"image":                            {s.Image, "postgres:17"},
		"synchronous.mode":                 {s.PostgreSQL.Synchronous.Mode, tuskv1alpha1.SynchronousQuorum},
		"synchronous.number":               {s.PostgreSQL.Synchronous.Number, int32(1)},
		"synchronous.whenTooFewStandbys":   {s.PostgreSQL.Synchronous.WhenTooFewStandbys, tuskv1alpha1.StandbyShortageDegrade},
		"bootstrap.initdb set":             {s.Bootstrap.InitDB != nil, true},
		"bootstrap.initdb.database, owner": {fmt.Sprint(s.Bootstrap.InitDB.Database, "/", s.Bootstrap.InitDB.Owner), "app/app"},
	}
	for field, c := range checks {
		if c[0] != c[1] {
			t.Errorf("default %s = %v, want %v", field, c[0], c[1])
		}
	}
}

func TestBackupSpecIsImmutable(t *testing.T) {
	ctx := context.Background()
	backup := &tuskv1alpha1.PostgresBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: newNamespace(t)},
		Spec:       tuskv1alpha1.PostgresBackupSpec{Cluster: corev1.LocalObjectReference{Name: "one"}},
	}
	if err := env.Client.Create(ctx, backup); err != nil {
		t.Fatal(err)
	}
	expectRejected(t, mergePatchObject(backup, `spec: {cluster: {name: two}}`), "a PostgresBackup's spec cannot change")
}

func TestSamplesAreAccepted(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "config", "samples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ns := newNamespace(t)
	applied := 0
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		obj := object(t, string(data), `{}`)
		obj.SetNamespace(ns)
		if err := env.Client.Create(context.Background(), obj); err != nil {
			t.Errorf("%s: %v", filepath.Base(f), err)
		}
		applied++
	}
	if applied < 4 {
		t.Fatalf("applied %d samples, expected at least 4", applied)
	}
}

// TestKubectlExplain checks what a user sees: `kubectl explain` shows the
// doc comments of the fields, served by the API server's OpenAPI.
func TestKubectlExplain(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatal("kubectl is not on PATH; it is part of the machine image this project supports")
	}
	kubeconfig, err := env.KubeconfigFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "explain", "postgrescluster.spec").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl explain: %v\n%s", err, out)
	}
	for _, want := range []string{
		"Spec is the desired cluster.",
		"instances\t<integer>",
		"Instances is the number of PostgreSQL servers",
		"storage\t<Object> -required-",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kubectl explain postgrescluster.spec lacks %q:\n%s", want, out)
		}
	}
}
