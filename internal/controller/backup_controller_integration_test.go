//go:build integration

package controller

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/testenv"
)

func TestBackupStaysPendingWithAReason(t *testing.T) {
	ctx := context.Background()
	backup := &tuskv1alpha1.PostgresBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: newNamespace(t)},
		Spec:       tuskv1alpha1.PostgresBackupSpec{Cluster: corev1.LocalObjectReference{Name: "pg"}},
	}
	if err := env.Client.Create(ctx, backup); err != nil {
		t.Fatal(err)
	}
	got := &tuskv1alpha1.PostgresBackup{}
	testenv.Eventually(t, waitTimeout, func(ctx context.Context) error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(backup), got); err != nil {
			return err
		}
		if got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("observedGeneration %d, generation %d", got.Status.ObservedGeneration, got.Generation)
		}
		return nil
	})
	if got.Status.Phase != tuskv1alpha1.BackupPhasePending {
		t.Errorf("phase %q, want Pending", got.Status.Phase)
	}
	ready := meta.FindStatusCondition(got.Status.Conditions, ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionUnknown || ready.Reason != ReasonBackupNotImplemented {
		t.Errorf("Ready condition %+v, want Unknown/%s", ready, ReasonBackupNotImplemented)
	}
}
