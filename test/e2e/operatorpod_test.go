//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// operatorPods lists the pods of the operator's Deployment.
func operatorPods(ctx context.Context) ([]corev1.Pod, error) {
	d, err := clientset.AppsV1().Deployments(operatorNamespace).Get(ctx, operatorDeployment, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("%w (is the operator deployed? make deploy)", err)
	}
	list, err := clientset.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector),
	})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// restartOperator deletes the operator's pods and waits until the
// Deployment has replaced every one of them with a new, Ready pod.
func restartOperator(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	old, err := operatorPods(ctx)
	if err != nil || len(old) == 0 {
		t.Fatalf("finding the operator's pods (%d found): %v", len(old), err)
	}
	gone := map[types.UID]bool{}
	for _, p := range old {
		gone[p.UID] = true
		if err := clientset.CoreV1().Pods(operatorNamespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting operator pod %s: %v", p.Name, err)
		}
	}
	eventually(t, 3*time.Minute, "new operator pods Ready", func(ctx context.Context) (bool, error) {
		pods, err := operatorPods(ctx)
		if err != nil {
			return false, err
		}
		for i := range pods {
			if gone[pods[i].UID] || pods[i].DeletionTimestamp != nil || !podIsReady(&pods[i]) {
				return false, nil
			}
		}
		return len(pods) == len(old), nil
	})
}
