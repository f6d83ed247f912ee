package plugin

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"tusk.dev/tusk/internal/instanceapi"
)

// addInstanceStatuses writes each running instance's own /status: the
// manager's report, which its TCP port serves to the operator alone, is
// asked for in the pod (kubectl exec: tusk instance status, over the
// manager's local socket).
func (ro *reportOptions) addInstanceStatuses(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, b *bundle, pods []corev1.Pod) {
	for _, p := range pods {
		path := fmt.Sprintf("instances/%s.status.json", p.Name)
		if !containerRunning(&p, instanceContainer) {
			b.note("%s: the %s container is not running", path, instanceContainer)
			continue
		}
		out, err := execInPod(ctx, cfg, cs, &p, instanceapi.ManagerBinary, "instance", "status")
		if err != nil {
			b.note("%s: %v", path, err)
			continue
		}
		b.add(path, out)
	}
}

func containerRunning(p *corev1.Pod, name string) bool {
	for _, st := range p.Status.ContainerStatuses {
		if st.Name == name {
			return st.State.Running != nil
		}
	}
	return false
}

// execInPod runs command in the pod's instance container, as kubectl exec
// does, and returns what it printed; what it printed on stderr is the
// error when it fails.
func execInPod(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, p *corev1.Pod, command ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	if err := streamInPod(ctx, cfg, cs, p, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}, command...); err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return nil, fmt.Errorf("%w: %s", err, msg)
		}
		return nil, err
	}
	return stdout.Bytes(), nil
}
