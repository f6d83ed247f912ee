package controller

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

// Paths inside a PostgreSQL pod.
const (
	dataMount      = "/var/lib/postgresql/data"
	pgdata         = dataMount + "/pgdata"
	binMount       = "/tusk-bin" // holds instanceapi.ManagerBinary
	runMount       = "/run/tusk"
	podinfoMount   = "/etc/tusk/podinfo"
	configMount    = "/etc/tusk/config"
	superuserMount = "/etc/tusk/secrets/superuser"
	appMount       = "/etc/tusk/secrets/app"
	serverTLSMount = "/etc/tusk/tls/server"
	replTLSMount   = instanceapi.ReplicationTLSDir
	configFileName = "config.json"
)

// fsGroup owns the data volume; the PostgreSQL user gets it as a
// supplementary group, so any image's non-root user can write there.
const fsGroup = 26

// instancePod builds the pod of one instance. role is the role Tusk wants
// it to have; the instance manager reads it from the pod's labels at start.
func instancePod(c *tuskv1alpha1.PostgresCluster, name string, role instanceapi.Role, managerImage string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: c.Namespace,
			Labels:    instanceLabels(c, name, role),
		},
		Spec: instancePodSpec(c, name, managerImage),
	}
	setAnnotation(pod, AnnotationHash, podSpecHash(c, managerImage))
	for k, v := range prometheusAnnotations {
		setAnnotation(pod, k, v)
	}
	return pod
}

// prometheusAnnotations let a Prometheus that discovers pods by the common
// prometheus.io annotations scrape each instance's /metrics (HTTPS on the
// manager's port); config/monitoring ships configurations that also add
// the labels the alert rules need.
var prometheusAnnotations = map[string]string{
	"prometheus.io/scrape": "true",
	"prometheus.io/scheme": "https",
	"prometheus.io/port":   strconv.Itoa(instanceapi.DefaultStatusPort),
	"prometheus.io/path":   instanceapi.PathMetrics,
}

// podSpecHash identifies everything a pod is built from except its name:
// pods whose hash differs from the cluster's are rolled out.
func podSpecHash(c *tuskv1alpha1.PostgresCluster, managerImage string) string {
	spec := instancePodSpec(c, c.Name+"-0", managerImage)
	h, _ := hashOf(spec) // a PodSpec always marshals
	return h
}

func instanceLabels(c *tuskv1alpha1.PostgresCluster, name string, role instanceapi.Role) map[string]string {
	l := map[string]string{LabelCluster: c.Name, LabelInstance: name}
	if role != "" {
		l[LabelRole] = string(role)
	}
	return l
}

func instancePodSpec(c *tuskv1alpha1.PostgresCluster, name, managerImage string) corev1.PodSpec {
	return corev1.PodSpec{
		InitContainers:                []corev1.Container{bootstrapContainer(managerImage)},
		Containers:                    []corev1.Container{postgresContainer(c)},
		Volumes:                       instanceVolumes(c, name),
		SecurityContext:               podSecurityContext(c),
		Affinity:                      instanceAffinity(c),
		Tolerations:                   c.Spec.Tolerations,
		PriorityClassName:             c.Spec.PriorityClassName,
		TerminationGracePeriodSeconds: ptr.To[int64](terminationGracePeriod),
		EnableServiceLinks:            ptr.To(false),
		// The token lets the instance manager renew the primary Lease and
		// list the namespace's EndpointSlices (draining), the only rights
		// its service account has.
		ServiceAccountName:           instanceServiceAccountName(c),
		AutomountServiceAccountToken: ptr.To(true),
		Hostname:                     name,
	}
}

// bootstrapContainer copies the tusk binary from the operator image into a
// shared volume, so any PostgreSQL image can run the instance manager.
func bootstrapContainer(managerImage string) corev1.Container {
	return corev1.Container{
		Name:            "bootstrap",
		Image:           managerImage,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{"/tusk", "instance", "bootstrap-copy", "--dest", instanceapi.ManagerBinary},
		VolumeMounts:    []corev1.VolumeMount{{Name: "tusk-bin", MountPath: binMount}},
		SecurityContext: containerSecurityContext(),
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
	}
}

func postgresContainer(c *tuskv1alpha1.PostgresCluster) corev1.Container {
	return corev1.Container{
		Name:            instanceapi.PostgresContainer,
		Image:           imageToRun(c),
		ImagePullPolicy: c.Spec.ImagePullPolicy,
		Command:         append([]string{instanceapi.ManagerBinary, "instance", "run"}, instanceArgs(c)...),
		Env: []corev1.EnvVar{
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
			{Name: "PGDATA", Value: pgdata},
			// kubectl exec psql reaches the local server without flags.
			{Name: "PGHOST", Value: runMount + "/socket"},
		},
		Ports: []corev1.ContainerPort{
			{Name: "postgres", ContainerPort: postgresPort},
			{Name: "status", ContainerPort: instanceapi.DefaultStatusPort},
		},
		Resources:       c.Spec.Resources,
		SecurityContext: containerSecurityContext(),
		VolumeMounts:    append(postgresMounts(), backupMounts(c)...),
		ReadinessProbe:  httpsProbe(instanceapi.PathReadyz, 1, 3),
		// /healthz is the instance manager's own health: a long crash
		// recovery or WAL replay never gets the pod killed.
		LivenessProbe: httpsProbe(instanceapi.PathHealthz, 10, 6),
	}
}

func instanceArgs(c *tuskv1alpha1.PostgresCluster) []string {
	init := initDB(c)
	args := []string{
		"--name=$(POD_NAME)",
		"--cluster=" + c.Name,
		"--pgdata=" + pgdata,
		"--role-file=" + podinfoMount + "/labels",
		"--role=replica",
		"--upstream-host=" + rwServiceName(c),
		"--upstream-port=" + strconv.Itoa(postgresPort),
		// The -rw Service can still point at a stepped-down primary.
		"--upstream-primary-only",
		"--database=" + init.Database,
		"--owner=" + init.Owner,
		"--superuser-password-file=" + superuserMount + "/" + keyPassword,
		"--app-password-file=" + appMount + "/" + keyPassword,
		"--tls-dir=" + serverTLSMount,
		"--replication-tls-dir=" + replTLSMount,
		"--api-client-cn=" + OperatorClientCN,
		"--config-file=" + configMount + "/" + configFileName,
		"--lease-name=" + primaryLeaseName(c),
		"--socket-dir=" + runMount + "/socket",
		"--run-dir=" + runMount,
		// SIGTERM: hand a primary's role over, leave the Services, drain
		// (docs/high-availability.md).
		"--handover-wait=" + handoverWait,
		"--drain-timeout=" + drainTimeout,
	}
	args = append(args, leaseArgs(c.Spec.HighAvailability)...)
	return append(args, archiveArgs(c)...)
}

// leaseArgs pass the spec's Lease timings to the instance manager, none
// when the spec leaves them to its defaults (so existing pods do not roll).
// The primary fences itself 1.5 renewal intervals before its Lease can
// expire, as with the defaults (renew 2s, fence 3s before the 10s Lease
// expires); the CRD keeps that margin below the duration.
func leaseArgs(ha *tuskv1alpha1.HighAvailabilitySpec) []string {
	if ha == nil {
		return nil
	}
	renew := ha.LeaseRenewInterval.Duration
	return []string{
		"--lease-duration=" + ha.LeaseDuration.Duration.String(),
		"--lease-renew-every=" + renew.String(),
		"--lease-fence-margin=" + (renew * 3 / 2).String(),
	}
}

func httpsProbe(path string, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: path, Port: intstr.FromString("status"), Scheme: corev1.URISchemeHTTPS,
		}},
		PeriodSeconds:    period,
		FailureThreshold: failures,
		TimeoutSeconds:   2,
	}
}

func postgresMounts() []corev1.VolumeMount {
	return []corev1.VolumeMount{
		{Name: "pgdata", MountPath: dataMount},
		{Name: "tusk-bin", MountPath: binMount, ReadOnly: true},
		{Name: "run", MountPath: runMount},
		{Name: "tmp", MountPath: "/tmp"},
		{Name: "shm", MountPath: "/dev/shm"},
		{Name: "podinfo", MountPath: podinfoMount, ReadOnly: true},
		{Name: "config", MountPath: configMount, ReadOnly: true},
		{Name: "superuser", MountPath: superuserMount, ReadOnly: true},
		{Name: "app", MountPath: appMount, ReadOnly: true},
		{Name: "server-tls", MountPath: serverTLSMount, ReadOnly: true},
		{Name: "replication-tls", MountPath: replTLSMount, ReadOnly: true},
	}
}

func instanceVolumes(c *tuskv1alpha1.PostgresCluster, name string) []corev1.Volume {
	emptyDir := func(n string) corev1.Volume {
		return corev1.Volume{Name: n, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	}
	vols := []corev1.Volume{
		{Name: "pgdata", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}},
		emptyDir("tusk-bin"), emptyDir("run"), emptyDir("tmp"),
		// PostgreSQL's dynamic shared memory (parallel queries) lives in
		// /dev/shm; the container runtime's default is 64 MiB.
		{Name: "shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
		{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
			Items: []corev1.DownwardAPIVolumeFile{{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}},
		}}},
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: configConfigMapName(c)},
		}}},
		secretVolume("superuser", superuserPasswordSecret(c)),
		secretVolume("app", appPasswordSecret(c)),
		secretVolume("server-tls", serverSecretName(c)),
		secretVolume("replication-tls", replicationSecretName(c)),
	}
	return append(vols, backupVolumes(c)...)
}

func secretVolume(name, secretName string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: secretName, DefaultMode: ptr.To[int32](0o440),
	}}}
}

// podSecurityContext and containerSecurityContext pass the restricted Pod
// Security Standard. The image must run as a non-root numeric user.
func podSecurityContext(c *tuskv1alpha1.PostgresCluster) *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:        ptr.To(true),
		RunAsUser:           c.Spec.PostgresUID,
		RunAsGroup:          c.Spec.PostgresGID,
		FSGroup:             ptr.To[int64](fsGroup),
		FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
		SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

func containerSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// instanceAffinity prefers spreading the instances over nodes, on top of
// the user's own affinity.
func instanceAffinity(c *tuskv1alpha1.PostgresCluster) *corev1.Affinity {
	a := &corev1.Affinity{}
	if c.Spec.Affinity != nil {
		a = c.Spec.Affinity.DeepCopy()
	}
	if a.PodAntiAffinity == nil {
		a.PodAntiAffinity = &corev1.PodAntiAffinity{}
	}
	a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution,
		corev1.WeightedPodAffinityTerm{Weight: 100, PodAffinityTerm: corev1.PodAffinityTerm{
			LabelSelector: &metav1.LabelSelector{MatchLabels: clusterLabels(c)},
			TopologyKey:   corev1.LabelHostname,
		}})
	return a
}

// instancePVC builds the volume of one instance. It has no owner: the
// cluster's deletion keeps or deletes it per spec.storage.reclaimPolicy.
func instancePVC(c *tuskv1alpha1.PostgresCluster, name string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: instanceLabels(c, name, "")},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: c.Spec.Storage.StorageClassName,
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: c.Spec.Storage.Size},
			},
		},
	}
}
