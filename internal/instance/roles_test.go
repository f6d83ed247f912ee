package instance

import (
	"testing"

	"tusk.dev/tusk/internal/instanceapi"
)

func TestRoleAtStart(t *testing.T) {
	const primary, replica = instanceapi.RolePrimary, instanceapi.RoleReplica
	for _, tc := range []struct {
		name       string
		asked      instanceapi.Role
		standby    bool
		holdsLease bool
		want       instanceapi.Role
	}{
		{"a primary as labelled", primary, false, true, primary},
		{"a primary labelled so without the Lease (fenced later)", primary, false, false, primary},
		{"a new primary read a stale replica label", replica, false, true, primary},
		{"a former primary asked to be a replica", replica, false, false, replica},
		{"a replica labelled primary waits for promote", primary, true, true, replica},
		{"a replica as labelled", replica, true, false, replica},
	} {
		if got := roleAtStart(tc.asked, tc.standby, tc.holdsLease); got != tc.want {
			t.Errorf("%s: roleAtStart(%s, standby=%v, holds=%v) = %s, want %s", tc.name, tc.asked, tc.standby, tc.holdsLease, got, tc.want)
		}
	}
}
