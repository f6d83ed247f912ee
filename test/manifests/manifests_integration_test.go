//go:build integration

// Package manifests tests what `make deploy` installs, on a real API server:
// every object is accepted, and the operator pod passes the restricted Pod
// Security Standard as enforced by the API server's own admission.
package manifests

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"tusk.dev/tusk/internal/testenv"
)

// render returns the objects of the kustomization config/<dir>.
func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	return testenv.Kustomize(t, filepath.Join(testenv.RepoRoot(), "config", dir))
}

func TestDeployManifests(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	ctx := context.Background()

	var deployment *appsv1.Deployment
	for _, obj := range render(t, "default") {
		if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("test"), client.ForceOwnership); err != nil {
			t.Fatalf("applying %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		if obj.GetKind() == "Deployment" {
			deployment = &appsv1.Deployment{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, deployment); err != nil {
				t.Fatal(err)
			}
		}
	}
	if deployment == nil || deployment.Name != "tusk-operator" || deployment.Namespace != "tusk-system" {
		t.Fatalf("want Deployment tusk-system/tusk-operator, got %v", deployment)
	}

	// The namespace enforces "restricted"; the API server refuses a pod
	// that breaks it, so creating the operator's pod is the proof.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "operator-pod", Namespace: deployment.Namespace},
		Spec:       deployment.Spec.Template.Spec,
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatalf("the operator pod breaks the restricted Pod Security Standard: %v", err)
	}

	// And the check is live: a pod that may escalate privileges is refused.
	bad := pod.DeepCopy()
	bad.Name = "escalating-pod"
	bad.ResourceVersion = ""
	escalate := true
	bad.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = &escalate
	err = env.Client.Create(ctx, bad)
	if err == nil || !strings.Contains(err.Error(), "violates PodSecurity") {
		t.Fatalf("a privilege-escalating pod was not refused by PodSecurity admission: %v", err)
	}
}
