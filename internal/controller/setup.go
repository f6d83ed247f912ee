// Package controller holds Tusk's reconcilers: one per kind, one file per
// concern. The reconcilers read and write the Kubernetes API only; what
// happens inside a PostgreSQL pod is the instance manager's job.
package controller

import (
	ctrl "sigs.k8s.io/controller-runtime"
)

// SetupWithManager registers every Tusk reconciler with mgr.
func SetupWithManager(mgr ctrl.Manager, cfg Config) error {
	clusters := &ClusterReconciler{Client: mgr.GetClient(), Config: cfg, Recorder: mgr.GetEventRecorder("tusk")}
	if err := clusters.SetupWithManager(mgr); err != nil {
		return err
	}
	return (&BackupReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr)
}
