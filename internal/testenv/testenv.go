// Package testenv starts a real kube-apiserver and etcd (controller-runtime's
// envtest) with Tusk's CRDs installed, for integration tests.
//
// The binaries come from hack/build-k8s.sh, which builds them from the Go
// module proxy once and caches them; KUBEBUILDER_ASSETS overrides that.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"tusk.dev/tusk/internal/scheme"
)

// Env is a running API server with Tusk's CRDs.
type Env struct {
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// Client is a client for Config with Tusk's scheme.
	Client client.Client

	env *envtest.Environment
}

// RepoRoot is the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Start starts the API server and etcd and installs the CRDs from
// config/crd/bases, and from extraCRDDirs. Call Stop when done.
func Start(extraCRDDirs ...string) (*Env, error) {
	assets, err := binaryAssets()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     append([]string{filepath.Join(RepoRoot(), "config", "crd", "bases")}, extraCRDDirs...),
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	cfg, err := env.Start()
	if err == nil {
		var c client.Client
		if c, err = newClient(cfg); err == nil {
			return &Env{Config: cfg, Client: c, env: env}, nil
		}
	}
	// envtest leaves the processes running when a later step of Start
	// (such as installing an invalid CRD) fails; never leak them.
	_ = env.Stop()
	return nil, fmt.Errorf("while starting kube-apiserver and etcd from %s: %w", assets, err)
}

func newClient(cfg *rest.Config) (client.Client, error) {
	s, err := scheme.New()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return nil, fmt.Errorf("while creating a client: %w", err)
	}
	return c, nil
}

// Stop stops the API server and etcd.
func (e *Env) Stop() error { return e.env.Stop() }

// KubeconfigFile writes an administrator kubeconfig for the API server into
// dir and returns its path, for tools such as kubectl.
func (e *Env) KubeconfigFile(dir string) (string, error) {
	return e.writeKubeconfig(filepath.Join(dir, "kubeconfig"), envtest.User{Name: "tusk-test-admin", Groups: []string{"system:masters"}})
}

// UserKubeconfigFile writes a kubeconfig for user, who can do only what
// RBAC grants it or its groups, into dir and returns its path.
func (e *Env) UserKubeconfigFile(dir, user string, groups ...string) (string, error) {
	return e.writeKubeconfig(filepath.Join(dir, "kubeconfig-"+user), envtest.User{Name: user, Groups: groups})
}

func (e *Env) writeKubeconfig(path string, u envtest.User) (string, error) {
	user, err := e.env.ControlPlane.AddUser(u, nil)
	if err != nil {
		return "", fmt.Errorf("while adding the test user %s: %w", u.Name, err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		return "", fmt.Errorf("while writing a kubeconfig: %w", err)
	}
	return path, os.WriteFile(path, data, 0o600)
}

// binaryAssets finds kube-apiserver and etcd: KUBEBUILDER_ASSETS when set,
// otherwise the project's cached build (built first if missing).
func binaryAssets() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	script := filepath.Join(RepoRoot(), "hack", "build-k8s.sh")
	cmd := exec.Command(script, "kube-apiserver", "etcd") //nolint:gosec // the project's own script, at a fixed path

	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("while building kube-apiserver and etcd with hack/build-k8s.sh: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}
