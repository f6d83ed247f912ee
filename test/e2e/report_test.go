//go:build e2e

package e2e

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/plugin"
)

// checkReport runs `kubectl tusk report` (the plugin's own command, in
// process) on a live cluster and checks the bundle: every instance
// manager's own /status is there, every pod's postgres log is there with PostgreSQL's own records in the manager's schema
// (logger postgres, the cluster and instance named), the operator's lines
// about the cluster are there, and no value of the namespace's Secrets
// appears in any file.
func checkReport(t *testing.T, ns, cluster string) {
	t.Helper()
	ctrllog.SetLogger(logr.Discard())
	path := filepath.Join(t.TempDir(), "report.zip")
	var out bytes.Buffer
	cmd := plugin.NewCommand(plugin.BinaryName, genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &out})
	cmd.SetArgs([]string{"report", cluster, "-n", ns, "--since", "1h", "-o", path})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("kubectl tusk report %s: %v\n%s", cluster, err, out.String())
	}
	files := readZip(t, path)
	pods, err := clusterPods(ctx, ns, cluster)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		log, ok := files[cluster+"-report/logs/"+p.Name+"/postgres.log"]
		if !ok {
			t.Errorf("the report has no postgres log of %s; files: %v", p.Name, fileNames(files))
			continue
		}
		if !hasPostgresRecord(log, cluster, p.Name) {
			t.Errorf("the postgres log of %s in the report has no PostgreSQL record in the manager's schema (logger postgres, cluster %s, instance %s)", p.Name, cluster, p.Name)
		}
		var st instanceapi.Status
		if err := json.Unmarshal(files[cluster+"-report/instances/"+p.Name+".status.json"], &st); err != nil || st.Role == "" {
			t.Errorf("the report has no /status of %s (%v); README.txt:\n%s", p.Name, err, files[cluster+"-report/README.txt"])
		}
	}
	operatorLines := 0
	for name, data := range files {
		if strings.HasPrefix(name, cluster+"-report/operator/") {
			operatorLines += bytes.Count(data, []byte("\n"))
		}
	}
	if operatorLines == 0 {
		t.Errorf("the report has no operator log line about the cluster; files: %v", fileNames(files))
	}
	needles, err := secretNeedles(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		for what, needle := range needles {
			if bytes.Contains(data, []byte(needle)) {
				t.Errorf("the report's %s holds the value of %s", name, what)
			}
		}
		if privateKeyPEM.Match(data) {
			t.Errorf("the report's %s holds a private key", name)
		}
	}
	t.Logf("kubectl tusk report: %d files, %d operator lines; %s", len(files), operatorLines, strings.TrimSpace(out.String()))
}

// hasPostgresRecord says whether a container log holds a record of
// PostgreSQL's own (jsonlog) forwarded in the manager's schema.
func hasPostgresRecord(log []byte, cluster, instance string) bool {
	for _, line := range bytes.Split(log, []byte("\n")) {
		var r struct {
			Logger   string `json:"logger"`
			Level    string `json:"level"`
			Cluster  string `json:"cluster"`
			Instance string `json:"instance"`
			Timeline *int   `json:"timeline"`
			Severity string `json:"severity"`
			PID      *int   `json:"pid"`
		}
		if json.Unmarshal(line, &r) != nil {
			continue
		}
		if r.Logger == "postgres" && r.Cluster == cluster && r.Instance == instance && r.Level != "" &&
			r.Timeline != nil && r.Severity != "" && r.PID != nil {
			return true
		}
	}
	return false
}

func readZip(t *testing.T, path string) map[string][]byte {
	t.Helper()
	zr, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = zr.Close() }()
	files := map[string][]byte{}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(rc)
		_ = rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		files[f.Name] = data
	}
	return files
}

func fileNames(files map[string][]byte) []string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	return names
}
