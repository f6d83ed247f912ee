// Package scheme builds the runtime.Scheme with every kind Tusk reads or
// writes. It is a leaf: the operator, the tests and (later) the instance
// manager and the kubectl plugin all use it without importing each other.
package scheme

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// New returns a scheme with the Kubernetes built-in kinds and Tusk's kinds.
func New() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("while registering Kubernetes kinds: %w", err)
	}
	if err := tuskv1alpha1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("while registering Tusk kinds: %w", err)
	}
	return s, nil
}
