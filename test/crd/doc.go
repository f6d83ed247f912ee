// Package crd tests Tusk's CustomResourceDefinitions as users meet them: the
// generated schema (unit tests) and the validation a real API server applies
// at `kubectl apply` time (integration tests, build tag "integration").
package crd
