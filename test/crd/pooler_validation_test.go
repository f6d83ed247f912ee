//go:build integration

package crd

import (
	"context"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/pooler"
)

const basePooler = `
apiVersion: tusk.dev/v1alpha1
kind: PostgresPooler
metadata: {name: pg-pooler}
spec:
  cluster: {name: pg}
`

// TestInvalidPoolersAreRejectedOnCreate is the table of pooler specs the
// API server refuses, with the message a user reads.
func TestInvalidPoolersAreRejectedOnCreate(t *testing.T) {
	ns := newNamespace(t)
	cases := []struct {
		name, overlay, want string
	}{
		{"no cluster", `spec: {cluster: null}`, "spec.cluster: Required value"},
		{"an unknown type", `spec: {type: primary}`, `Unsupported value: "primary"`},
		{"statement pooling", `spec: {poolMode: statement}`, `Unsupported value: "statement"`},
		{"no instances", `spec: {instances: 0}`, "should be greater than or equal to 1"},
		{"a pool smaller than its minimum", `spec: {pool: {defaultSize: 5, minSize: 10}}`, "pool.minSize cannot be larger than pool.defaultSize"},
		{"a parameter name in capitals", `spec: {parameters: {Server_Idle_Timeout: "30"}}`, "PgBouncer parameter names are lowercase letters"},
		{"a value with a line break", `spec: {parameters: {server_idle_timeout: "30\nauth_type = trust"}}`,
			"PgBouncer parameter values cannot contain line breaks"},
		{"a name that is no DNS label", `metadata: {name: pg.pooler}`, "a PostgresPooler name starts with a lowercase letter"},
		{"a name too long", `metadata: {name: ` + longName[:51] + `}`, "a PostgresPooler name is at most 50 characters"},
		{"a pause too long", `spec: {pauseTimeout: 90s}`, "spec.pauseTimeout is between 100ms and 60s"},
		{"a pause too short", `spec: {pauseTimeout: 10ms}`, "spec.pauseTimeout is between 100ms and 60s"},
	}
	for _, name := range pooler.ReservedParameters {
		cases = append(cases, struct{ name, overlay, want string }{
			"reserved " + name, `spec: {parameters: {server_idle_timeout: "30", ` + name + `: "x"}}`,
			"PgBouncer parameter " + name + " is set by Tusk and cannot be set here",
		})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := object(t, basePooler, tc.overlay)
			obj.SetNamespace(ns)
			expectRejected(t, env.Client.Create(context.Background(), obj), tc.want)
		})
	}
}

// A pooler with every field set is accepted; one with none gets the
// defaults; the cluster cannot change; the scale subresource scales it.
func TestPoolerDefaultsUpdatesAndScale(t *testing.T) {
	ctx := context.Background()
	full := object(t, basePooler, `spec: {type: ro, instances: 3, poolMode: session, clientTLS: {required: true},
  pool: {defaultSize: 20, minSize: 2, reserveSize: 5, maxClientConnections: 1000, maxDatabaseConnections: 50},
  parameters: {server_idle_timeout: "30", ignore_startup_parameters: "extra_float_digits"},
  resources: {requests: {cpu: 100m, memory: 64Mi}}}`)
	full.SetNamespace(newNamespace(t))
	if err := env.Client.Create(ctx, full); err != nil {
		t.Fatalf("a full spec: %v", err)
	}

	obj := object(t, basePooler, `{}`)
	obj.SetNamespace(newNamespace(t))
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	got := &tuskv1alpha1.PostgresPooler{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Type != tuskv1alpha1.PoolerTypeRW || got.Spec.Instances != 2 || got.Spec.PoolMode != tuskv1alpha1.PoolModeTransaction ||
		got.Spec.PauseTimeout == nil || got.Spec.PauseTimeout.Duration != 5*time.Second {
		t.Errorf("defaults: type %q, instances %d, poolMode %q, pauseTimeout %v; want rw, 2, transaction, 5s",
			got.Spec.Type, got.Spec.Instances, got.Spec.PoolMode, got.Spec.PauseTimeout)
	}

	expectRejected(t, mergePatchObject(obj, `spec: {cluster: {name: other}}`), "spec.cluster cannot change")
	if err := mergePatchObject(obj, `spec: {type: ro, parameters: {server_idle_timeout: "60"}}`); err != nil {
		t.Errorf("changing the type and a parameter: %v", err)
	}
	if err := scaleTo(t, obj, 4); err != nil {
		t.Fatalf("scaling to 4: %v", err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Instances != 4 {
		t.Errorf("spec.instances = %d after scaling to 4", got.Spec.Instances)
	}
}
