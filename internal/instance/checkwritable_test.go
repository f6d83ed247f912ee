package instance

import (
	"errors"
	"testing"

	"tusk.dev/tusk/internal/instance/lifecycle"
	"tusk.dev/tusk/internal/instanceapi"
)

// TestCheckWritable keeps checkWritable's answers (their messages and
// their status codes) as they were before it asked the lifecycle.
func TestCheckWritable(t *testing.T) {
	t.Parallel()
	running := []lifecycle.Event{lifecycle.Bootstrapping, lifecycle.Started, lifecycle.Accepting}
	with := func(more ...lifecycle.Event) []lifecycle.Event {
		return append(append([]lifecycle.Event(nil), running...), more...)
	}
	up := instanceapi.Upstream{Host: "pg-2", Port: 5432}
	tests := []struct {
		name    string
		role    instanceapi.Role
		events  []lifecycle.Event
		want    string
		wantErr error
	}{
		{"a running primary", instanceapi.RolePrimary, running, "", nil},
		{"a replica", instanceapi.RoleReplica, running, "this instance is not a writable primary: this instance is a replica", errNotWritable},
		{"fenced by the Lease", instanceapi.RolePrimary, with(lifecycle.Stopped, lifecycle.LeaseLost),
			"this instance is not a writable primary: this primary is fenced", errNotWritable},
		{"fenced by hand, stopping", instanceapi.RolePrimary, with(lifecycle.FencedByHand),
			"this instance is not a writable primary: this primary is fenced", errNotWritable},
		{"terminating", instanceapi.RolePrimary, with(lifecycle.Terminating),
			"this instance is not a writable primary: this primary is stopping", errNotWritable},
		{"a rejoin pending", instanceapi.RolePrimary, with(lifecycle.RejoinPending(up)),
			"this instance is not a writable primary: this instance is rejoining as a replica", errNotWritable},
		{"starting", instanceapi.RolePrimary, []lifecycle.Event{lifecycle.Started},
			"postgres is not accepting connections (phase Starting)", errPostgresDown},
		{"crashed", instanceapi.RolePrimary, with(lifecycle.Exited),
			"postgres is not accepting connections (phase Crashed)", errPostgresDown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := &Manager{state: state{role: tt.role, life: inPhase(t, tt.events...)}}
			err := m.checkWritable()
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("got %v, want none", err)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) || err.Error() != tt.want {
				t.Errorf("got %v, want %q (%v)", err, tt.want, tt.wantErr)
			}
		})
	}
}
