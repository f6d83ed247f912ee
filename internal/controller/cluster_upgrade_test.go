package controller

import (
	"slices"
	"strings"
	"testing"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

func TestImageMajor(t *testing.T) {
	for image, want := range map[string]int32{
		"postgres:17":                           17,
		"postgres:17.2-bookworm":                17,
		"tusk/postgres:15":                      15,
		"registry:5000/pg/postgres:18@sha256:a": 18,
		"registry:5000/pg/postgres":             0,
		"postgres@sha256:0123abc":               0,
		"postgres:latest":                       0,
		"postgres:9.6":                          9,
	} {
		if got := imageMajor(image); got != want {
			t.Errorf("imageMajor(%q) = %d, want %d", image, got, want)
		}
	}
}

func TestReportedMajor(t *testing.T) {
	for version, want := range map[string]int32{"15.18": 15, "18.6": 18, "": 0, "beta": 0} {
		if got := reportedMajor(&instanceapi.Status{PostgresVersion: version}); got != want {
			t.Errorf("reportedMajor(%q) = %d, want %d", version, got, want)
		}
	}
	if got := reportedMajor(nil); got != 0 {
		t.Errorf("reportedMajor(nil) = %d", got)
	}
}

// The instances run the old image until the new one is needed, and again
// after a failed upgrade, as long as spec.image asks for that upgrade.
func TestImageToRun(t *testing.T) {
	c := defaultCluster()
	c.Spec.Image = "tusk/postgres:17"
	if got := imageToRun(c); got != c.Spec.Image {
		t.Errorf("with no upgrade: %s", got)
	}
	// spec.image asks for 17 on data of 15, and the upgrade has not
	// started (a replica was not ready, say): nothing rolls out 17 yet.
	c.Status.PostgresMajor, c.Status.Image = 15, "tusk/postgres:15"
	recordImage(c)
	if got := imageToRun(c); got != "tusk/postgres:15" || c.Status.Image != "tusk/postgres:15" {
		t.Errorf("with an upgrade waiting to start: runs %s, status.image %s", got, c.Status.Image)
	}
	for phase, want := range map[tuskv1alpha1.MajorUpgradePhase]string{
		tuskv1alpha1.MajorUpgradeStoppingReplicas: "tusk/postgres:15",
		tuskv1alpha1.MajorUpgradeUpgrading:        "tusk/postgres:17",
		tuskv1alpha1.MajorUpgradeRollingBack:      "tusk/postgres:15",
		tuskv1alpha1.MajorUpgradeFailed:           "tusk/postgres:15",
		tuskv1alpha1.MajorUpgradeCloningReplicas:  "tusk/postgres:17",
		tuskv1alpha1.MajorUpgradeSucceeded:        "tusk/postgres:17",
	} {
		c.Status.MajorUpgrade = &tuskv1alpha1.MajorUpgradeStatus{FromImage: "tusk/postgres:15", ToImage: "tusk/postgres:17", Phase: phase}
		if got := imageToRun(c); got != want {
			t.Errorf("%s: runs %s, want %s", phase, got, want)
		}
	}
	// After a failed upgrade to 17, spec.image asks for 18: 15 runs until
	// that upgrade starts; a minor update of 15 runs at once.
	c.Status.MajorUpgrade.Phase = tuskv1alpha1.MajorUpgradeFailed
	c.Spec.Image = "tusk/postgres:18"
	if got := imageToRun(c); got != "tusk/postgres:15" {
		t.Errorf("after spec.image asked for 18: %s", got)
	}
	c.Spec.Image = "tusk/postgres:15.19"
	if got := imageToRun(c); got != c.Spec.Image {
		t.Errorf("after spec.image went back to 15: %s", got)
	}
}

// The upgrade's pod runs the new image with the old image's server copied
// in by an init container, and keeps the spec's hash.
func TestWithUpgrade(t *testing.T) {
	c := defaultCluster()
	c.Spec.Image = "tusk/postgres:17"
	u := &tuskv1alpha1.MajorUpgradeStatus{Attempt: "17-1", FromImage: "tusk/postgres:15", ToImage: "tusk/postgres:17", Mode: "link"}
	c.Status.MajorUpgrade = u
	pod := instancePod(c, c.Name+"-1", instanceapi.RolePrimary, "tusk/operator:dev")
	hash := pod.Annotations[AnnotationHash]
	withUpgrade(pod, u)
	if pod.Annotations[AnnotationHash] != hash || pod.Annotations[AnnotationUpgradeAttempt] != "17-1" {
		t.Errorf("annotations %v", pod.Annotations)
	}
	inits := pod.Spec.InitContainers
	if len(inits) != 2 || inits[0].Name != "bootstrap" || inits[1].Name != oldServerContainer || inits[1].Image != "tusk/postgres:15" {
		t.Fatalf("init containers %+v", inits)
	}
	if got := strings.Join(inits[1].Command, " "); got != "/tusk-bin/tusk instance copy-binaries --dest /tusk-old" {
		t.Errorf("old server's copy runs %q", got)
	}
	ctr := pod.Spec.Containers[0]
	if ctr.Image != "tusk/postgres:17" {
		t.Errorf("postgres runs %s", ctr.Image)
	}
	for _, arg := range []string{"--upgrade-from=/tusk-old", "--upgrade-mode=link", "--upgrade-attempt=17-1"} {
		if !slices.Contains(ctr.Command, arg) {
			t.Errorf("postgres lacks %s: %v", arg, ctr.Command)
		}
	}
	if *inits[1].SecurityContext.ReadOnlyRootFilesystem != true || *inits[1].SecurityContext.AllowPrivilegeEscalation {
		t.Errorf("the old server's copy is not restricted: %+v", inits[1].SecurityContext)
	}
}

// After a major upgrade the new database system archives beside the old
// one's location, never into it.
func TestArchivePathAfterAnUpgrade(t *testing.T) {
	c := backupCluster()
	base := archivePath(c)
	c.Status.ArchiveSubdirectory = "pg17-1795780800"
	if got, want := archivePath(c), base+"/pg17-1795780800"; got != want {
		t.Errorf("archivePath = %s, want %s", got, want)
	}
	c.Spec.Backup.ObjectStore.Path = "shop/orders/"
	if got, want := archivePath(c), "shop/orders/pg17-1795780800"; got != want {
		t.Errorf("with a path of the user's: %s, want %s", got, want)
	}
}

// TestCommittedBeforeRollback: only a report of the attempt's own newer
// major turns a rollback forward; a failure report, another major or no
// report at all leave it rolling back.
func TestCommittedBeforeRollback(t *testing.T) {
	u := &tuskv1alpha1.MajorUpgradeStatus{FromMajor: 15, ToMajor: 17}
	for _, tc := range []struct {
		name string
		st   *instanceapi.Status
		want bool
	}{
		{"no report", nil, false},
		{"serving the old major", &instanceapi.Status{PostgresVersion: "15.8"}, false},
		{"a failed attempt", &instanceapi.Status{Upgrade: &instanceapi.UpgradeStatus{Failed: true, RolledBack: true, To: 17}}, false},
		{"data of the attempt's major", &instanceapi.Status{Upgrade: &instanceapi.UpgradeStatus{NewerData: 17, To: 17}}, true},
		{"data of yet another major", &instanceapi.Status{Upgrade: &instanceapi.UpgradeStatus{NewerData: 18, To: 18}}, false},
	} {
		if got := committedBeforeRollback(tc.st, u); got != tc.want {
			t.Errorf("%s: committedBeforeRollback = %v, want %v", tc.name, got, tc.want)
		}
	}
}
