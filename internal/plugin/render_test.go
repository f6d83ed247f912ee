package plugin

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden with the current output")

// golden compares got with testdata/<name>.golden, or rewrites the file
// when the tests run with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/plugin -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from %s (run go test ./internal/plugin -update and review the diff):\n--- got\n%s", name, path, got)
	}
}

func TestRenderStatusGolden(t *testing.T) {
	empty := &tuskv1alpha1.PostgresCluster{}
	empty.Name, empty.Namespace, empty.Spec.Instances = "fresh", "shop", 1
	for name, c := range map[string]*tuskv1alpha1.PostgresCluster{
		"status-healthy":        healthyCluster(),
		"status-switching":      switchingCluster(),
		"status-degraded":       degradedCluster(),
		"status-new":            empty,
		"status-upgrade-failed": upgradeFailedCluster(),
		"status-importing":      importingCluster(),
		"status-upgraded":       upgradedCluster(),
		"status-served-by":      servedCluster(),
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			if err := renderStatus(&out, c); err != nil {
				t.Fatal(err)
			}
			golden(t, name, out.Bytes())
		})
	}
}

func TestPrintStatusFormats(t *testing.T) {
	for _, format := range []string{"json", "yaml"} {
		t.Run(format, func(t *testing.T) {
			var out bytes.Buffer
			if err := printStatus(&out, healthyCluster(), format); err != nil {
				t.Fatal(err)
			}
			golden(t, "status-healthy."+format, out.Bytes())
		})
	}
	if err := checkOutput("wide"); err == nil {
		t.Error("-o wide accepted")
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0:               "0 B",
		512:             "512 B",
		1023:            "1023 B",
		1024:            "1 KiB",
		1536:            "1.5 KiB",
		1024*1024 - 1:   "1 MiB",
		16 << 20:        "16 MiB",
		16<<20 + 96:     "16 MiB",
		3<<30 + 300<<20: "3.3 GiB",
		5 << 40:         "5 TiB",
		1 << 62:         "4096 PiB",
		-2048:           "-2 KiB",
	} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
