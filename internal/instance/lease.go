package instance

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/ptr"
)

// LeaseOptions configure the primary's Lease: the primary holds it and
// renews it; a primary that cannot renew stops accepting writes before the
// Lease can expire, so that when the operator promotes another instance
// (only after it expired) there are never two primaries taking writes.
// Without a Client the manager holds no Lease (outside Kubernetes).
type LeaseOptions struct {
	// Client reaches the coordination.k8s.io API.
	Client coordinationclient.LeasesGetter
	// Namespace and Name locate the cluster's Lease.
	Namespace, Name string
	// Duration is how long a renewal holds the Lease.
	Duration time.Duration
	// RenewEvery is how often the primary renews it; also the timeout of
	// each renewal.
	RenewEvery time.Duration
	// FenceMargin is how long before the Lease could expire the primary
	// fences itself: Duration - FenceMargin after its last good renewal.
	FenceMargin time.Duration
}

// Default Lease timings: the primary fences itself 7 s after its last good
// renewal, and another instance can be promoted 10 s after it.
const (
	DefaultLeaseDuration    = 10 * time.Second
	DefaultLeaseRenewEvery  = 2 * time.Second
	DefaultLeaseFenceMargin = 3 * time.Second
)

func (o LeaseOptions) enabled() bool { return o.Client != nil }

func (o LeaseOptions) validate() error {
	if !o.enabled() {
		return nil
	}
	if o.Name == "" || o.Namespace == "" {
		return errors.New("the primary Lease needs a name and a namespace")
	}
	if o.RenewEvery <= 0 || o.FenceMargin < o.RenewEvery || o.Duration <= o.FenceMargin {
		return fmt.Errorf("lease timings must satisfy 0 < renew (%s) <= fence margin (%s) < duration (%s)", o.RenewEvery, o.FenceMargin, o.Duration)
	}
	return nil
}

// errLeaseHeld means another instance holds a Lease that has not expired.
var errLeaseHeld = errors.New("another instance holds the primary Lease")

// leaseKeeper holds, renews and releases the Lease for one instance, and
// judges another holder's Lease expired by its own clock: unchanged for
// longer than its duration since this keeper first saw that version, as
// client-go's leader election does, so clock skew between nodes does not
// matter.
type leaseKeeper struct {
	opts     LeaseOptions
	identity string
	now      func() time.Time
	log      logr.Logger

	lastRenew       time.Time // when the last successful renewal was sent
	observedVersion string
	observedAt      time.Time

	// renewed and renewFailed count the primary's renewals (metrics).
	renewed, renewFailed atomic.Uint64
}

func newLeaseKeeper(opts LeaseOptions, identity string, log logr.Logger) *leaseKeeper {
	return &leaseKeeper{opts: opts, identity: identity, now: time.Now, log: log}
}

// hold acquires the Lease, or renews it when this instance holds it.
func (k *leaseKeeper) hold(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, k.opts.RenewEvery)
	defer cancel()
	sent := k.now()
	leases := k.opts.Client.Leases(k.opts.Namespace)
	lease, err := leases.Get(ctx, k.opts.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: k.opts.Name, Namespace: k.opts.Namespace}}
		k.claim(lease, sent)
		if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("while creating the primary Lease: %w", err)
		}
		k.lastRenew = sent
		return nil
	}
	if err != nil {
		return fmt.Errorf("while reading the primary Lease: %w", err)
	}
	k.observe(lease)
	if holder := ptr.Deref(lease.Spec.HolderIdentity, ""); holder != "" && holder != k.identity && !k.expired(lease) {
		return fmt.Errorf("%w (%s)", errLeaseHeld, holder)
	}
	k.claim(lease, sent)
	updated, err := leases.Update(ctx, lease, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("while renewing the primary Lease: %w", err)
	}
	k.observe(updated)
	k.lastRenew = sent
	return nil
}

// claim writes this instance into the Lease as its holder.
func (k *leaseKeeper) claim(lease *coordinationv1.Lease, at time.Time) {
	now := metav1.NewMicroTime(at)
	if ptr.Deref(lease.Spec.HolderIdentity, "") != k.identity {
		lease.Spec.HolderIdentity = ptr.To(k.identity)
		lease.Spec.AcquireTime = &now
		lease.Spec.LeaseTransitions = ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
	}
	lease.Spec.RenewTime = &now
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(k.opts.Duration / time.Second)) //nolint:gosec // seconds of a lease
}

// observe notes when this keeper first saw the Lease's current version:
// expiry counts from then.
func (k *leaseKeeper) observe(lease *coordinationv1.Lease) {
	if lease.ResourceVersion == k.observedVersion {
		return
	}
	k.observedVersion, k.observedAt = lease.ResourceVersion, k.now()
	k.log.V(1).Info("Observed the primary Lease", "holder", ptr.Deref(lease.Spec.HolderIdentity, ""), "resourceVersion", lease.ResourceVersion)
}

// watch reads the Lease and observes it. An instance that is not the
// primary watches it all the time, so that when the operator promotes it
// after a failure the former primary's Lease counts as expired a duration
// after its last renewal, not a duration after the promote call.
func (k *leaseKeeper) watch(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, k.opts.RenewEvery)
	defer cancel()
	lease, err := k.opts.Client.Leases(k.opts.Namespace).Get(ctx, k.opts.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil // no primary ever held it: nothing to wait for
	}
	if err != nil {
		return fmt.Errorf("while reading the primary Lease: %w", err)
	}
	k.observe(lease)
	return nil
}

// holder reads who holds the Lease ("" when nobody does).
func (k *leaseKeeper) holder(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, k.opts.RenewEvery)
	defer cancel()
	lease, err := k.opts.Client.Leases(k.opts.Namespace).Get(ctx, k.opts.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("while reading the primary Lease: %w", err)
	}
	k.observe(lease)
	return ptr.Deref(lease.Spec.HolderIdentity, ""), nil
}

// expired says the Lease has not changed for longer than its duration.
func (k *leaseKeeper) expired(lease *coordinationv1.Lease) bool {
	d := time.Duration(ptr.Deref(lease.Spec.LeaseDurationSeconds, 0)) * time.Second
	return k.now().Sub(k.observedAt) > d
}

// release gives the Lease up after a clean step-down, so the next primary
// need not wait for it to expire.
func (k *leaseKeeper) release(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, k.opts.RenewEvery)
	defer cancel()
	leases := k.opts.Client.Leases(k.opts.Namespace)
	lease, err := leases.Get(ctx, k.opts.Name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("while reading the primary Lease: %w", err)
	}
	// Someone else holding it (a fenced primary's successor) is as good as
	// released: this instance holds nothing more.
	if err == nil && ptr.Deref(lease.Spec.HolderIdentity, "") == k.identity {
		lease.Spec.HolderIdentity = nil
		if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("while releasing the primary Lease: %w", err)
		}
	}
	k.lastRenew = time.Time{}
	return nil
}

// mustFence says the last good renewal is so old that the Lease may soon
// expire in the operator's eyes: a primary must stop taking writes now.
func (k *leaseKeeper) mustFence() bool {
	return k.lastRenew.IsZero() || k.now().Sub(k.lastRenew) > k.opts.Duration-k.opts.FenceMargin
}
