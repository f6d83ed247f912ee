package instance

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// fakeClock is a settable clock for the keeper's timing decisions.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestLeaseKeeperFencesBeforeExpiry(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	k := &leaseKeeper{opts: LeaseOptions{Duration: 10 * time.Second, RenewEvery: 2 * time.Second, FenceMargin: 3 * time.Second}, now: clock.now}
	if !k.mustFence() {
		t.Fatal("a primary that never renewed must fence")
	}
	k.lastRenew = clock.t
	for _, tc := range []struct {
		after time.Duration
		fence bool
	}{{0, false}, {6 * time.Second, false}, {7 * time.Second, false}, {7*time.Second + time.Millisecond, true}, {10 * time.Second, true}} {
		clock.t = k.lastRenew.Add(tc.after)
		if got := k.mustFence(); got != tc.fence {
			t.Errorf("%s after the last renewal: mustFence = %v, want %v", tc.after, got, tc.fence)
		}
	}
}

func TestLeaseKeeperJudgesExpiryByItsOwnClock(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	k := &leaseKeeper{now: clock.now}
	// The holder's renewTime is far in the past by our clock (skew): only
	// how long the version stays unchanged counts.
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "7"}, Spec: coordinationv1.LeaseSpec{
		HolderIdentity: ptr.To("other"), LeaseDurationSeconds: ptr.To[int32](10), RenewTime: &metav1.MicroTime{Time: time.Unix(0, 0)},
	}}
	k.observe(lease)
	clock.t = clock.t.Add(9 * time.Second)
	k.observe(lease)
	if k.expired(lease) {
		t.Fatal("expired after 9 s of a 10 s Lease")
	}
	clock.t = clock.t.Add(2 * time.Second)
	if !k.expired(lease) {
		t.Fatal("not expired after 11 s unchanged")
	}
	lease.ResourceVersion = "8" // renewed
	k.observe(lease)
	if k.expired(lease) {
		t.Fatal("a renewed Lease counts as expired")
	}
}

func TestLeaseOptionsValidate(t *testing.T) {
	client := kubernetes.NewForConfigOrDie(&rest.Config{Host: "https://127.0.0.1:1"}).CoordinationV1()
	good := LeaseOptions{Client: client, Namespace: "ns", Name: "pg-primary", Duration: 10 * time.Second, RenewEvery: 2 * time.Second, FenceMargin: 3 * time.Second}
	if err := good.validate(); err != nil {
		t.Fatal(err)
	}
	if err := (LeaseOptions{}).validate(); err != nil {
		t.Fatalf("no Lease is valid: %v", err)
	}
	for name, o := range map[string]LeaseOptions{
		"no name":                     {Client: client, Namespace: "ns", Duration: 10 * time.Second, RenewEvery: time.Second, FenceMargin: 2 * time.Second},
		"margin shorter than renew":   {Client: client, Namespace: "ns", Name: "x", Duration: 10 * time.Second, RenewEvery: 3 * time.Second, FenceMargin: 2 * time.Second},
		"margin as long as the lease": {Client: client, Namespace: "ns", Name: "x", Duration: 3 * time.Second, RenewEvery: time.Second, FenceMargin: 3 * time.Second},
	} {
		if err := o.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
