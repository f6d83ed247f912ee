package controller

import (
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// retentionResult is what a cluster's retention last did, as the
// BackupScheduleReconciler tells the ClusterReconciler, which alone writes
// the cluster's status.
type retentionResult struct {
	// applied says the last run ran to the end; reason and message are
	// the BackupRetention condition's.
	applied         bool
	reason, message string
	// appliedAt is when retention last ran to the end, and
	// firstRecoverability the first recoverability point it found then
	// (zero: no complete backup). Both zero while it has not since the
	// operator started: status keeps what it says.
	appliedAt, firstRecoverability time.Time
}

// condition is the BackupRetention condition of r.
func (r retentionResult) condition() metav1.Condition {
	status := metav1.ConditionFalse
	if r.applied {
		status = metav1.ConditionTrue
	}
	return metav1.Condition{Type: tuskv1alpha1.ConditionBackupRetention, Status: status, Reason: r.reason, Message: r.message}
}

// retentionResults hand the outcomes of retention from the
// BackupScheduleReconciler to the ClusterReconciler: in memory, as
// retention runs again when the operator starts, and shared by both
// reconcilers. A changed outcome wakes the cluster's reconcile.
type retentionResults struct {
	mu      sync.Mutex
	results map[client.ObjectKey]retentionResult
	changed chan event.GenericEvent
}

func newRetentionResults() *retentionResults {
	// A full channel drops the wake-up, never the result: the cluster's
	// next pass (at most pollSettled away) reads it.
	return &retentionResults{results: map[client.ObjectKey]retentionResult{}, changed: make(chan event.GenericEvent, 1024)}
}

// record keeps the outcome of a cluster's retention run and wakes the
// cluster's reconcile when it differs from the last.
func (s *retentionResults) record(key client.ObjectKey, r retentionResult) {
	s.mu.Lock()
	old, ok := s.results[key]
	s.results[key] = r
	s.mu.Unlock()
	if ok && old == r {
		return
	}
	select {
	case s.changed <- event.GenericEvent{Object: siblingCluster(key.Namespace, key.Name)}:
	default:
	}
}

// get is the last outcome of a cluster's retention, and whether there is
// one.
func (s *retentionResults) get(key client.ObjectKey) (retentionResult, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.results[key]
	return r, ok
}

// forget drops a cluster's outcome: it was deleted, or has no retention.
func (s *retentionResults) forget(key client.ObjectKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.results, key)
}

// source wakes the reconcile of a cluster whose outcome changed.
func (s *retentionResults) source() source.Source {
	return source.Channel(s.changed, &handler.EnqueueRequestForObject{})
}
