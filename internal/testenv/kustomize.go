package testenv

import (
	"bytes"
	"errors"
	"io"
	"os/exec"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Kustomize renders the kustomization in dir with `kubectl kustomize` and
// returns its objects.
func Kustomize(t testing.TB, dir string) []*unstructured.Unstructured {
	t.Helper()
	out, err := exec.Command("kubectl", "kustomize", dir).Output() //nolint:gosec // a directory of the repository, from the test
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, u)
	}
}
