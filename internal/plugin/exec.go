package plugin

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"tusk.dev/tusk/internal/instanceapi"
)

// instanceContainer is the container of an instance pod that runs the
// instance manager and PostgreSQL (internal/controller/cluster_pods.go).
const instanceContainer = instanceapi.PostgresContainer

// streamInPod runs command in the pod's instance container through the
// pods/exec subresource, as kubectl exec does, with the streams of opts
// attached. With opts.Tty the remote side has one terminal: its stderr
// comes on opts.Stdout, and opts.Stderr must be nil.
func streamInPod(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, p *corev1.Pod, opts remotecommand.StreamOptions, command ...string) error {
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.Namespace).Name(p.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: instanceContainer,
			Command:   command,
			Stdin:     opts.Stdin != nil,
			Stdout:    opts.Stdout != nil,
			Stderr:    opts.Stderr != nil,
			TTY:       opts.Tty,
		}, scheme.ParameterCodec)
	exec, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return err
	}
	return exec.StreamWithContext(ctx, opts)
}
