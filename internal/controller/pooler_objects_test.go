package controller

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/pooler"
)

const testPoolerImage = "tusk/pgbouncer:test"

// defaultPooler is a pooler as the API server stores it when the user gave
// only the cluster: the CRD defaults filled in.
func defaultPooler() *tuskv1alpha1.PostgresPooler {
	return &tuskv1alpha1.PostgresPooler{
		ObjectMeta: metav1.ObjectMeta{Name: "pg-pooler", Namespace: "db"},
		Spec: tuskv1alpha1.PostgresPoolerSpec{
			Cluster: corev1.LocalObjectReference{Name: "pg"}, Type: tuskv1alpha1.PoolerTypeRW,
			Instances: 2, PoolMode: tuskv1alpha1.PoolModeTransaction,
		},
	}
}

// customPooler sets every field a user can set.
func customPooler() *tuskv1alpha1.PostgresPooler {
	p := defaultPooler()
	p.Name = "reports"
	p.Spec.Type = tuskv1alpha1.PoolerTypeRO
	p.Spec.Instances = 3
	p.Spec.PoolMode = tuskv1alpha1.PoolModeSession
	p.Spec.Pool = tuskv1alpha1.PoolerPoolSpec{DefaultSize: ptr.To[int32](20), MinSize: ptr.To[int32](2),
		ReserveSize: ptr.To[int32](5), MaxClientConnections: ptr.To[int32](1000), MaxDatabaseConnections: ptr.To[int32](50)}
	p.Spec.ClientTLS.Required = true
	p.Spec.Parameters = map[string]tuskv1alpha1.PgBouncerParameterValue{"server_idle_timeout": "30"}
	p.Spec.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
	}
	return p
}

func TestPoolerBuildersGolden(t *testing.T) {
	for name, p := range map[string]*tuskv1alpha1.PostgresPooler{"default": defaultPooler(), "custom": customPooler()} {
		t.Run(name, func(t *testing.T) {
			cm, err := poolerConfigMap(p)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "pooler-"+name+"-configmap", cm)
			golden(t, "pooler-"+name+"-statefulset", poolerStatefulSet(p, testPoolerImage, "tusk/operator:test", "0123abcd"))
			golden(t, "pooler-"+name+"-service", poolerService(p))
			golden(t, "pooler-"+name+"-peers-service", poolerPeersService(p))
			golden(t, "pooler-"+name+"-pdb", poolerPDB(p))
		})
	}
}

// The pooler's pods must not be taken for the cluster's: its -r Service
// and budget select every pod with the cluster's label.
func TestPoolerPodsAreNotTheClustersPods(t *testing.T) {
	d := poolerStatefulSet(defaultPooler(), testPoolerImage, "tusk/operator:test", "")
	if _, ok := d.Spec.Template.Labels[LabelCluster]; ok {
		t.Errorf("pooler pods carry %s: the cluster's Services would send clients to them", LabelCluster)
	}
}

// A spec that bypassed the API server's validation is refused by the
// builder with the reason, not written into pgbouncer.ini.
func TestPoolerConfigMapRefusesReservedParameters(t *testing.T) {
	p := defaultPooler()
	p.Spec.Parameters = map[string]tuskv1alpha1.PgBouncerParameterValue{"auth_type": "trust"}
	_, err := poolerConfigMap(p)
	if err == nil || !strings.Contains(err.Error(), `"auth_type" is set by Tusk`) {
		t.Fatalf("got %v, want the reserved parameter named", err)
	}
}

// The [peers] section names every pod the StatefulSet may have, by the
// name the headless Service gives it, with peer_id = ordinal + 1 (what
// `tusk pooler` derives from its pod's name), and no more pods than the
// API lets a pooler have.
func TestPoolerPeersAreEveryPossiblePod(t *testing.T) {
	p := defaultPooler()
	peers := poolerPeers(p)
	if len(peers) != poolerMaxPeers {
		t.Fatalf("%d peers, want %d", len(peers), poolerMaxPeers)
	}
	for i, peer := range peers {
		pod := fmt.Sprintf("%s-%d", poolerStatefulSet(p, "", "", "").Name, i)
		id, err := pooler.PeerIDFromPodName(pod)
		if err != nil || peer.ID != id || peer.Host != pod+".pg-pooler-peers.db.svc" || peer.Port != postgresPort {
			t.Errorf("peer %d: %+v; the pod %s has peer_id %d (%v)", i, peer, pod, id, err)
		}
	}
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "tusk.dev_postgrespoolers.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	for _, v := range crd.Spec.Versions {
		instances := v.Schema.OpenAPIV3Schema.Properties["spec"].Properties["instances"]
		if instances.Maximum == nil || *instances.Maximum > poolerMaxPeers {
			t.Errorf("%s: spec.instances may go up to %v, past the %d pods the [peers] section names", v.Name, instances.Maximum, poolerMaxPeers)
		}
	}
}
