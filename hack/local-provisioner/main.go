// Command local-provisioner is the local cluster's dynamic volume
// provisioner. For every pending claim of its StorageClass it creates a
// directory on the node and a `local` PersistentVolume pre-bound to the claim;
// when a released volume's reclaim policy is Delete it removes both.
//
// `local` volumes, unlike hostPath ones, get the pod's fsGroup applied by the
// kubelet, so a non-root PostgreSQL under the `restricted` Pod Security
// Standard can write to them, as on a real disk. It runs on the host (the
// local cluster starts it), so it needs no image and no privileged pod.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// annProvisionedBy marks the volumes this provisioner owns (the annotation
// the PV controller and external provisioners use).
const annProvisionedBy = "pv.kubernetes.io/provisioned-by"

type provisioner struct {
	client kubernetes.Interface
	pvcs   listersv1.PersistentVolumeClaimLister
	pvs    listersv1.PersistentVolumeLister
	name   string // provisioner name in the StorageClass
	class  string // StorageClass served
	node   string // node the volumes live on
	root   string // directory holding the volumes
	log    *slog.Logger
}

func main() {
	var p provisioner
	var kubeconfig string
	flag.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the provisioner's identity")
	flag.StringVar(&p.name, "provisioner", "tusk.dev/local", "provisioner name the StorageClass names")
	flag.StringVar(&p.class, "storage-class", "tusk-local", "StorageClass whose claims are served")
	flag.StringVar(&p.node, "node", "", "name of the node the volume directories are on")
	flag.StringVar(&p.root, "root", "", "directory under which volume directories are created")
	flag.Parse()
	p.log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(&p, kubeconfig); err != nil {
		p.log.Error("Provisioner stopped", "error", err)
		os.Exit(1)
	}
}

func run(p *provisioner, kubeconfig string) error {
	if p.node == "" || p.root == "" {
		return errors.New("-node and -root are required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("while loading kubeconfig: %w", err)
	}
	if p.client, err = kubernetes.NewForConfig(cfg); err != nil {
		return fmt.Errorf("while creating the client: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	factory := informers.NewSharedInformerFactory(p.client, 10*time.Minute)
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	}
	pvcInformer := factory.Core().V1().PersistentVolumeClaims()
	pvInformer := factory.Core().V1().PersistentVolumes()
	if _, err := pvcInformer.Informer().AddEventHandler(handler); err != nil {
		return fmt.Errorf("while watching claims: %w", err)
	}
	if _, err := pvInformer.Informer().AddEventHandler(handler); err != nil {
		return fmt.Errorf("while watching volumes: %w", err)
	}
	p.pvcs, p.pvs = pvcInformer.Lister(), pvInformer.Lister()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	p.log.Info("Serving claims", "storageClass", p.class, "node", p.node, "root", p.root)
	return p.loop(ctx, kick)
}

// loop reconciles everything whenever a watched object changes, and once a
// minute to retry failures.
func (p *provisioner) loop(ctx context.Context, kick <-chan struct{}) error {
	retry := time.NewTicker(time.Minute)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		case <-retry.C:
		}
		p.reconcile(ctx)
	}
}

func (p *provisioner) reconcile(ctx context.Context) {
	claims, err := p.pvcs.List(labels.Everything())
	if err != nil {
		p.log.Error("Listing claims failed", "error", err)
		return
	}
	for _, pvc := range claims {
		if p.wants(pvc) {
			if err := p.provision(ctx, pvc); err != nil {
				p.log.Error("Provisioning failed", "claim", pvc.Namespace+"/"+pvc.Name, "error", err)
			}
		}
	}
	volumes, err := p.pvs.List(labels.Everything())
	if err != nil {
		p.log.Error("Listing volumes failed", "error", err)
		return
	}
	for _, pv := range volumes {
		if p.released(pv) {
			if err := p.remove(ctx, pv); err != nil {
				p.log.Error("Deleting volume failed", "volume", pv.Name, "error", err)
			}
		}
	}
}

func (p *provisioner) wants(pvc *corev1.PersistentVolumeClaim) bool {
	return pvc.Status.Phase == corev1.ClaimPending && pvc.Spec.VolumeName == "" &&
		pvc.Spec.StorageClassName != nil && *pvc.Spec.StorageClassName == p.class &&
		pvc.DeletionTimestamp == nil
}

func (p *provisioner) released(pv *corev1.PersistentVolume) bool {
	return pv.Annotations[annProvisionedBy] == p.name && pv.Status.Phase == corev1.VolumeReleased &&
		pv.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimDelete &&
		pv.DeletionTimestamp == nil // deleted already, waiting for its finalizer
}

func (p *provisioner) provision(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	pv := p.volumeFor(pvc)
	if _, err := p.pvs.Get(pv.Name); err == nil {
		return nil // created already; the PV controller binds it
	}
	// 0755 root-owned, like the root of a fresh filesystem: the kubelet gives
	// the pod's fsGroup write access when it mounts the volume.
	if err := os.MkdirAll(pv.Spec.Local.Path, 0o755); err != nil { // #nosec G301 -- see above
		return fmt.Errorf("while creating %s: %w", pv.Spec.Local.Path, err)
	}
	// The informer may not have seen our last create yet: AlreadyExists is success.
	_, err := p.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil
	case err != nil:
		return fmt.Errorf("while creating volume %s: %w", pv.Name, err)
	}
	p.log.Info("Provisioned volume", "claim", pvc.Namespace+"/"+pvc.Name, "volume", pv.Name)
	return nil
}

// volumeFor builds the local PersistentVolume for a claim, pre-bound to it
// and pinned to this node.
func (p *provisioner) volumeFor(pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	name := "pvc-" + string(pvc.UID)
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annProvisionedBy: p.name}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   pvc.Spec.AccessModes,
			VolumeMode:                    pvc.Spec.VolumeMode,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              p.class,
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID,
			},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				Local: &corev1.LocalVolumeSource{Path: filepath.Join(p.root, name)},
			},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{p.node},
				}}}},
			}},
		},
	}
}

func (p *provisioner) remove(ctx context.Context, pv *corev1.PersistentVolume) error {
	path := filepath.Join(p.root, pv.Name)
	if pv.Spec.Local == nil || pv.Spec.Local.Path != path {
		return fmt.Errorf("volume %s is not under %s; leaving it alone", pv.Name, p.root)
	}
	if err := os.RemoveAll(path); err != nil {
		return fmt.Errorf("while removing %s: %w", path, err)
	}
	err := p.client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil // deleted by an earlier pass the informer had not seen yet
	case err != nil:
		return fmt.Errorf("while deleting volume %s: %w", pv.Name, err)
	}
	p.log.Info("Deleted volume", "volume", pv.Name)
	return nil
}
