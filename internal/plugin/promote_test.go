package plugin

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

func TestValidatePromote(t *testing.T) {
	tests := []struct {
		name     string
		cluster  func() *tuskv1alpha1.PostgresCluster
		instance string
		wantErr  string // a part of the error; "" for none
	}{
		{"a ready replica", healthyCluster, "orders-2", ""},
		{"a lagging but ready replica", healthyCluster, "orders-3", ""},
		{"the primary", healthyCluster, "orders-1", "orders-1 is already the primary of orders"},
		{"not an instance", healthyCluster, "orders-9", "orders-9 is not an instance of cluster orders; its instances are orders-1, orders-2, orders-3"},
		{"a replica that is not ready", degradedCluster, "orders-3",
			"orders-3 is not a ready replica (role replica, ready false, phase Crashed: postgres exited with status 1: FATAL:"},
		{"a switchover under way", switchingCluster, "orders-3", "a switchover from orders-1 to orders-2 is already under way"},
		{"a single instance", func() *tuskv1alpha1.PostgresCluster {
			c := healthyCluster()
			c.Spec.Instances, c.Status.Instances = 1, c.Status.Instances[:1]
			return c
		}, "orders-2", "has no replica to switch over to (spec.instances 1)"},
		{"scaled down to one, the replica still reported", func() *tuskv1alpha1.PostgresCluster {
			c := healthyCluster()
			c.Spec.Instances = 1
			return c
		}, "orders-2", "has no replica to switch over to"},
		{"no primary yet", func() *tuskv1alpha1.PostgresCluster {
			c := healthyCluster()
			c.Status.CurrentPrimary, c.Status.TargetPrimary = "", ""
			return c
		}, "orders-2", "has no primary yet"},
		{"a replica reporting no role", func() *tuskv1alpha1.PostgresCluster {
			c := healthyCluster()
			c.Status.Instances[1].Role = tuskv1alpha1.RoleUnknown
			return c
		}, "orders-2", "orders-2 is not a ready replica (role unknown"},
		{"being deleted", func() *tuskv1alpha1.PostgresCluster {
			c := healthyCluster()
			c.DeletionTimestamp = &metav1.Time{}
			return c
		}, "orders-2", "is being deleted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validatePromote(tt.cluster(), tt.instance)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.wantErr == "":
			case err == nil:
				t.Fatalf("accepted, want %q", tt.wantErr)
			case !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, errRefused):
				t.Fatalf("error %q, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestSwitchoverDone(t *testing.T) {
	done := healthyCluster()
	done.Status.CurrentPrimary, done.Status.TargetPrimary = "orders-2", "orders-2"
	notReady := degradedCluster()
	notReady.Status.CurrentPrimary, notReady.Status.TargetPrimary = "orders-2", "orders-2"
	other := switchingCluster()
	other.Status.TargetPrimary = "orders-3"
	tests := []struct {
		name    string
		c       *tuskv1alpha1.PostgresCluster
		want    bool
		wantErr string
	}{
		{"under way", switchingCluster(), false, ""},
		{"primary and Ready", done, true, ""},
		{"primary, not Ready yet", notReady, false, ""},
		{"refused by the operator", healthyCluster(), false, "the operator refused the switchover to orders-2 and orders-1 stays the primary"},
		{"replaced by another", other, false, "another switchover, to orders-3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := switchoverDone(tt.c, "orders-2")
			if got != tt.want || (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("switchoverDone = %v, %v; want %v, %q", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestProgressLines(t *testing.T) {
	var lines []string
	for _, p := range progressLines(switchingCluster()) {
		lines = append(lines, p.line)
	}
	got := strings.Join(lines, "\n")
	for _, want := range []string{
		"phase SwitchingOver",
		"primary orders-1, switching over to orders-2",
		"Ready=False (SwitchingOver): Switching the primary from orders-1 to orders-2",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("progress lacks %q:\n%s", want, got)
		}
	}
}

// The help says what promote writes: the request annotation on the
// cluster, never the status, which is the operator's alone.
func TestPromoteHelpNamesTheAnnotation(t *testing.T) {
	help := newPromoteCommand(&options{}).Long
	if !strings.Contains(help, tuskv1alpha1.AnnotationSwitchoverTo+"=INSTANCE on the PostgresCluster") {
		t.Errorf("promote --help does not name the annotation it sets:\n%s", help)
	}
	if strings.Contains(help, "status.") {
		t.Errorf("promote --help names a status field, which the plugin never writes:\n%s", help)
	}
}
