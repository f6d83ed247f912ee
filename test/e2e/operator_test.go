//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// Where `make deploy` (config/default) puts the operator.
const (
	operatorNamespace  = "tusk-system"
	operatorDeployment = "tusk-operator"
)

// TestOperatorDeploymentReady: the deployed operator's pods become Ready.
func TestOperatorDeploymentReady(t *testing.T) {
	parallel(t)
	eventually(t, 3*time.Minute, "deployment "+operatorDeployment+" available", func(ctx context.Context) (bool, error) {
		d, err := clientset.AppsV1().Deployments(operatorNamespace).Get(ctx, operatorDeployment, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("%w (is the operator deployed? make deploy)", err)
		}
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		return d.Status.ObservedGeneration == d.Generation && d.Status.ReadyReplicas == want &&
			d.Status.UpdatedReplicas == want, nil
	})
}

// TestPostgresClusterStatusWritten: the deployed operator records a
// PostgresCluster: observedGeneration and a Ready condition that says
// whether the cluster serves (never Unknown: the lifecycle runs).
func TestPostgresClusterStatusWritten(t *testing.T) {
	parallel(t)
	ns := newNamespace(t)
	ctx := context.Background()
	pgc := &tuskv1alpha1.PostgresCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e", Namespace: ns},
		Spec: tuskv1alpha1.PostgresClusterSpec{
			Instances: 1,
			Storage:   tuskv1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
		},
	}
	if err := kube.Create(ctx, pgc); err != nil {
		t.Fatalf("creating PostgresCluster: %v", err)
	}
	eventually(t, 2*time.Minute, "the operator to record PostgresCluster e2e", func(ctx context.Context) (bool, error) {
		got := &tuskv1alpha1.PostgresCluster{}
		if err := kube.Get(ctx, client.ObjectKeyFromObject(pgc), got); err != nil {
			return false, err
		}
		ready := meta.FindStatusCondition(got.Status.Conditions, tuskv1alpha1.ConditionReady)
		return got.Status.ObservedGeneration == got.Generation && ready != nil &&
			ready.Status != metav1.ConditionUnknown && ready.Reason != "" &&
			ready.ObservedGeneration == got.Generation, nil
	})
}
