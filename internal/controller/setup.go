// Package controller holds Tusk's reconcilers: one per kind, one file per
// concern. The reconcilers read and write the Kubernetes API only; what
// happens inside a PostgreSQL pod is the instance manager's job.
package controller

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SetupWithManager registers every Tusk reconciler with mgr.
func SetupWithManager(mgr ctrl.Manager, cfg Config) error {
	clusters := &ClusterReconciler{Client: mgr.GetClient(), Config: cfg, Recorder: mgr.GetEventRecorder("tusk")}
	if err := clusters.SetupWithManager(mgr); err != nil {
		return err
	}
	return (&BackupReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("tusk")}).SetupWithManager(mgr)
}

// CacheOptions limit what the manager's cache holds to what Tusk reads:
// of the Leases, only its clusters' primary Leases (every node renews a
// Lease of its own every few seconds, which Tusk has no use for).
func CacheOptions() cache.Options {
	ours, err := labels.NewRequirement(LabelCluster, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant label key: cannot fail
	}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&coordinationv1.Lease{}: {Label: labels.NewSelector().Add(*ours)},
	}}
}
