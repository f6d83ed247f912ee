package controller

import (
	"cmp"
	"context"
	"errors"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/pki"
)

// LabelProbeOf names the cluster an SLI probe pod measures. The probe's
// pods do not carry LabelCluster: that label selects the cluster's
// instances (Services, the PodDisruptionBudget, the NetworkPolicy, the
// scale subresource), and a probe is none of them.
const LabelProbeOf = "tusk.dev/probe-of"

// Defaults of spec.monitoring.probe, as the API sets them.
const (
	defaultProbeInterval  = 5 * time.Second
	defaultProbeObjective = "99.9"
	probeMetricsPort      = 8000
	probeCertMount        = "/etc/tusk/probe-tls"
	// probeUser is the probe's numeric user and group: the tusk image
	// needs no passwd entry.
	probeUser = 65532
)

func probeName(c *tuskv1alpha1.PostgresCluster) string       { return c.Name + "-probe" }
func probeSecretName(c *tuskv1alpha1.PostgresCluster) string { return c.Name + "-probe-tls" }

func probeEnabled(c *tuskv1alpha1.PostgresCluster) bool {
	return c.Spec.Monitoring != nil && c.Spec.Monitoring.Probe != nil
}

// reconcileProbe keeps the SLI probe's client certificate (the role's
// name as CN, from the cluster's client CA; ca.crt the servers' CA) and its
// Deployment while spec.monitoring.probe is set, and removes both when it
// is not.
func (r *ClusterReconciler) reconcileProbe(ctx context.Context, c *tuskv1alpha1.PostgresCluster, tls *clusterTLS) error {
	if !probeEnabled(c) {
		return errors.Join(
			r.deleteOwned(ctx, c, &appsv1.Deployment{ObjectMeta: objectMeta(c, probeName(c))}),
			r.deleteOwned(ctx, c, &corev1.Secret{ObjectMeta: objectMeta(c, probeSecretName(c))}))
	}
	if err := r.reconcileLeafSecret(ctx, c, probeSecretName(c), tls.clientCA, tls.ca.CertPEM, nil, func() (pki.KeyPair, error) {
		return pki.IssueClient(tls.clientCA, instanceapi.ProbeRole, leafValidity, time.Now())
	}); err != nil {
		return err
	}
	return r.applyOwned(ctx, c, probeDeployment(c, r.Config.InstanceManagerImage))
}

// probeDeployment runs `tusk probe` from the operator's image: one pod
// that writes through -rw and, when the cluster has replicas, reads
// through -ro. It needs no Kubernetes API access, and its metrics carry
// no secret (plain HTTP, scraped by the prometheus.io annotations or the
// shipped PodMonitor).
func probeDeployment(c *tuskv1alpha1.PostgresCluster, image string) *appsv1.Deployment {
	spec, interval := tuskv1alpha1.ProbeSpec{}, defaultProbeInterval
	if probeEnabled(c) {
		spec = *c.Spec.Monitoring.Probe
	}
	if spec.Interval != nil {
		interval = spec.Interval.Duration
	}
	service := func(name string) string { return name + "." + c.Namespace + ".svc" }
	args := []string{"/tusk", "probe",
		"--rw-host", service(rwServiceName(c)),
		"--interval", interval.String(),
		"--objective", cmp.Or(spec.Objective, defaultProbeObjective),
		"--cert-dir", probeCertMount,
		"--listen", ":" + strconv.Itoa(probeMetricsPort),
	}
	if c.Spec.Instances > 1 {
		args = append(args, "--ro-host", service(roServiceName(c)))
	}
	labels := map[string]string{LabelProbeOf: c.Name}
	return &appsv1.Deployment{
		ObjectMeta: objectMeta(c, probeName(c)),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{
					"prometheus.io/scrape": "true",
					"prometheus.io/scheme": "http",
					"prometheus.io/port":   strconv.Itoa(probeMetricsPort),
					"prometheus.io/path":   instanceapi.PathMetrics,
				}},
				Spec: probePodSpec(c, image, args),
			},
		},
	}
}

func probePodSpec(c *tuskv1alpha1.PostgresCluster, image string, command []string) corev1.PodSpec {
	return corev1.PodSpec{
		Containers: []corev1.Container{{
			Name:            "probe",
			Image:           image,
			ImagePullPolicy: corev1.PullIfNotPresent,
			Command:         command,
			Ports:           []corev1.ContainerPort{{Name: "metrics", ContainerPort: probeMetricsPort}},
			VolumeMounts:    []corev1.VolumeMount{{Name: "probe-tls", MountPath: probeCertMount, ReadOnly: true}},
			SecurityContext: containerSecurityContext(),
			LivenessProbe: &corev1.Probe{
				ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("metrics")}},
				PeriodSeconds: 10, FailureThreshold: 3,
			},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("24Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
			},
		}},
		Volumes: []corev1.Volume{secretVolume("probe-tls", probeSecretName(c))},
		// fsGroup makes the mounted key readable by the probe's group.
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:   ptr.To(true),
			RunAsUser:      ptr.To[int64](probeUser),
			RunAsGroup:     ptr.To[int64](probeUser),
			FSGroup:        ptr.To[int64](probeUser),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Tolerations:                  c.Spec.Tolerations,
		PriorityClassName:            c.Spec.PriorityClassName,
		EnableServiceLinks:           ptr.To(false),
		AutomountServiceAccountToken: ptr.To(false),
	}
}
