package instance

import (
	"os"
	"path/filepath"
	"testing"

	"tusk.dev/tusk/internal/instanceapi"
)

func TestRoleFromLabels(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    instanceapi.Role
		found   bool
		wantErr bool
	}{
		{"primary", "tusk.dev/cluster=\"orders\"\ntusk.dev/role=\"primary\"\n", instanceapi.RolePrimary, true, false},
		{"replica", "tusk.dev/role=\"replica\"", instanceapi.RoleReplica, true, false},
		{"no role label", "app=\"x\"\n", "", false, false},
		{"a prefix of the key is another label", "tusk.dev/role-old=\"primary\"\n", "", false, false},
		{"unknown role", "tusk.dev/role=\"leader\"\n", "", false, true},
		{"unquoted", "tusk.dev/role=primary\n", "", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "labels")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			got, found, err := RoleFromLabels(path)
			if (err != nil) != tt.wantErr || got != tt.want || found != tt.found {
				t.Fatalf("RoleFromLabels = %q, %v, %v; want %q, %v, error %v", got, found, err, tt.want, tt.found, tt.wantErr)
			}
		})
	}
	if _, _, err := RoleFromLabels(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("a missing labels file is not an error")
	}
}
