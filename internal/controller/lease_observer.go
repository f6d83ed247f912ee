package controller

import (
	"context"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// leaseObserver watches the clusters' primary Leases and judges, by the
// operator's own clock, whether one has expired: its holder has not renewed
// it (no new version) for longer than its duration since this operator
// first saw that version. That is how the primary's own fencing and the
// instance managers judge it too (internal/instance/lease.go), so clock
// skew between nodes never matters. An operator that restarts forgets what
// it saw and so waits a full duration again: slower, never unsafe.
type leaseObserver struct {
	mu   sync.Mutex
	now  func() time.Time
	seen map[types.NamespacedName]leaseSighting
}

// leaseSighting is one version of a Lease and when it was first seen.
type leaseSighting struct {
	version  string
	holder   string
	duration time.Duration
	since    time.Time
}

func newLeaseObserver() *leaseObserver {
	return &leaseObserver{now: time.Now, seen: map[types.NamespacedName]leaseSighting{}}
}

// observe records a version of a Lease; it reports whether the holder
// changed (acquired, released, taken over), which is worth a reconcile.
func (o *leaseObserver) observe(l *coordinationv1.Lease) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	key := types.NamespacedName{Namespace: l.Namespace, Name: l.Name}
	prev, known := o.seen[key]
	if known && prev.version == l.ResourceVersion {
		return false
	}
	holder := ptr.Deref(l.Spec.HolderIdentity, "")
	o.seen[key] = leaseSighting{
		version:  l.ResourceVersion,
		holder:   holder,
		duration: time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second,
		since:    o.now(),
	}
	return !known || prev.holder != holder
}

func (o *leaseObserver) forget(key types.NamespacedName) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.seen, key)
}

// leaseState is what the observer knows of one Lease.
type leaseState struct {
	// known: the Lease was seen at all.
	known bool
	// holder holds it ("" when released).
	holder string
	// free: nobody holds it, or its holder let it expire.
	free bool
	// wait is how long until it expires, when it is held.
	wait time.Duration
}

// state is what o knows of the Lease key; a nil observer (a reconciler
// built without one, in tests) knows nothing.
func (o *leaseObserver) state(key types.NamespacedName) leaseState {
	if o == nil {
		return leaseState{}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	s, known := o.seen[key]
	if !known {
		return leaseState{}
	}
	if s.holder == "" {
		return leaseState{known: true, free: true}
	}
	left := s.duration - o.now().Sub(s.since)
	return leaseState{known: true, holder: s.holder, free: left < 0, wait: max(left, 0)}
}

// handler feeds the observer from the Lease informer. Renewals (every few
// seconds) only update what was seen; a change of holder, or a Lease
// deleted, wakes the cluster up: a primary that released its Lease on the
// way out is replaced at once.
func (o *leaseObserver) handler() handler.EventHandler {
	enqueue := func(l client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if name := l.GetLabels()[LabelCluster]; name != "" {
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: l.GetNamespace(), Name: name}})
		}
	}
	seen := func(obj client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if l, ok := obj.(*coordinationv1.Lease); ok && o.observe(l) {
			enqueue(l, q)
		}
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			seen(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			seen(e.ObjectNew, q)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			o.forget(client.ObjectKeyFromObject(e.Object))
			enqueue(e.Object, q)
		},
	}
}
