package controller

import (
	"fmt"
	"path"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
	"tusk.dev/tusk/internal/pooler"
	"tusk.dev/tusk/internal/poolerapi"
)

// The objects of a PostgresPooler, built from its spec alone; the
// PoolerReconciler applies them.

// LabelPooler names the PostgresPooler a pod, Service or budget belongs to.
// The pooler's pods carry no LabelCluster: the cluster's -r Service and
// its budget select every pod with that label. Its other objects carry
// both, as the probe's Deployment does: the operator's cache holds only
// objects labelled with a cluster.
const LabelPooler = "tusk.dev/pooler"

// Paths inside a pooler pod, as `tusk pooler`'s flags name them.
const (
	poolerConfigMount = "/etc/tusk/pooler"
	poolerINI         = "pgbouncer.ini"
	poolerTLSMount    = "/etc/tusk/pooler-tls"
	poolerAuthMount   = "/etc/tusk/pooler-auth-tls"
	// poolerRunDir is PgBouncer's unix_socket_dir (its admin console, which
	// the manager reaches as the same OS user) and holds its pidfile.
	poolerRunDir     = "/run/tusk-pooler"
	poolerPgBouncer  = "/usr/sbin/pgbouncer"
	poolerStatusPort = poolerapi.DefaultPort
	// keyPoolerClientCA is the client CA in a pooler's server Secret: the
	// manager trusts the operator's certificate from it.
	keyPoolerClientCA = "client-ca.crt"
)

// poolerUser is the uid and gid PgBouncer runs as in tusk/pgbouncer (the
// package's postgres user, given the PostgreSQL images' uid).
const poolerUser = 999

// poolerDrainDelay is how long a stopping pod keeps accepting clients so
// that Services stop sending it new ones before PgBouncer's shutdown
// refuses them.
const poolerDrainDelay = 5

func poolerConfigMapName(p *tuskv1alpha1.PostgresPooler) string  { return p.Name + "-config" }
func poolerTLSSecretName(p *tuskv1alpha1.PostgresPooler) string  { return p.Name + "-tls" }
func poolerAuthSecretName(p *tuskv1alpha1.PostgresPooler) string { return p.Name + "-auth-tls" }

// poolerPeersServiceName is the headless Service that names each pod of
// p: <pod>.<pooler>-peers.<ns>.svc.
func poolerPeersServiceName(p *tuskv1alpha1.PostgresPooler) string { return p.Name + "-peers" }

// poolerObjectNames are the names of every object p makes (one name for
// its StatefulSet, Service and budget): none may be a cluster's.
func poolerObjectNames(p *tuskv1alpha1.PostgresPooler) []string {
	return []string{p.Name, poolerPeersServiceName(p), poolerConfigMapName(p), poolerTLSSecretName(p), poolerAuthSecretName(p)}
}

// poolerMaxPeers is how many pods the [peers] section names, the most a
// pooler may have (the CRD's maximum of spec.instances): scaling changes
// no configuration, so it rolls no pod.
const poolerMaxPeers = 32

// poolerPeers are the PgBouncer processes of p's pods, by peer_id
// (ordinal + 1): every pod the StatefulSet may have, whether it runs.
// A cancel request for a pod that does not run is forwarded nowhere.
func poolerPeers(p *tuskv1alpha1.PostgresPooler) []pooler.Peer {
	peers := make([]pooler.Peer, poolerMaxPeers)
	for i := range peers {
		peers[i] = pooler.Peer{ID: i + 1, Port: postgresPort,
			Host: fmt.Sprintf("%s-%d.%s.%s.svc", p.Name, i, poolerPeersServiceName(p), p.Namespace)}
	}
	return peers
}

// LabelPoolerOf names the cluster a pooler's pods connect to: its
// NetworkPolicy admits them to PostgreSQL.
const LabelPoolerOf = "tusk.dev/pooler-of"

// poolerSelector selects p's pods.
func poolerSelector(p *tuskv1alpha1.PostgresPooler) map[string]string {
	return map[string]string{LabelPooler: p.Name}
}

// poolerPodLabels are the labels of p's pods.
func poolerPodLabels(p *tuskv1alpha1.PostgresPooler) map[string]string {
	return map[string]string{LabelPooler: p.Name, LabelPoolerOf: p.Spec.Cluster.Name}
}

// poolerLabels are the labels of p's other objects.
func poolerLabels(p *tuskv1alpha1.PostgresPooler) map[string]string {
	return map[string]string{LabelPooler: p.Name, LabelCluster: p.Spec.Cluster.Name}
}

func poolerObjectMeta(p *tuskv1alpha1.PostgresPooler, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: p.Namespace, Labels: poolerLabels(p)}
}

// poolerServerHost is the cluster Service the pooler sends clients to, by
// a name the cluster's server certificate has (server TLS is verify-full).
// A switchover moves the -rw Service to the new primary; the pooler is
// paused across the move, then reconnects through the same name.
func poolerServerHost(p *tuskv1alpha1.PostgresPooler) string {
	c := siblingCluster(p.Namespace, p.Spec.Cluster.Name)
	name := rwServiceName(c)
	if p.Spec.Type == tuskv1alpha1.PoolerTypeRO {
		name = roServiceName(c)
	}
	return name + "." + p.Namespace + ".svc"
}

// poolerConfig is the PgBouncer configuration of p's pods.
func poolerConfig(p *tuskv1alpha1.PostgresPooler) pooler.Config {
	pool := p.Spec.Pool
	params := make(map[string]string, len(p.Spec.Parameters))
	for k, v := range p.Spec.Parameters {
		params[k] = string(v)
	}
	return pooler.Config{
		ListenAddr: "*", ListenPort: postgresPort, SocketDir: poolerRunDir,
		ServerHost: poolerServerHost(p), ServerPort: postgresPort,
		PoolMode: pooler.PoolMode(p.Spec.PoolMode),
		Pools: pooler.PoolSizes{
			DefaultPoolSize: int(ptr.Deref(pool.DefaultSize, 0)), MinPoolSize: int(ptr.Deref(pool.MinSize, 0)),
			ReservePoolSize: int(ptr.Deref(pool.ReserveSize, 0)), MaxClientConn: int(ptr.Deref(pool.MaxClientConnections, 0)),
			MaxDBConnections: int(ptr.Deref(pool.MaxDatabaseConnections, 0)),
		},
		AuthRole: pooler.AuthRole, AuthDatabase: "postgres",
		ServerTLS: pooler.ServerTLS{CAFile: path.Join(poolerTLSMount, keyCACert),
			CertFile: path.Join(poolerAuthMount, corev1.TLSCertKey), KeyFile: path.Join(poolerAuthMount, corev1.TLSPrivateKeyKey)},
		ClientTLS: pooler.ClientTLS{CertFile: path.Join(poolerTLSMount, corev1.TLSCertKey), CAFile: path.Join(poolerTLSMount, keyCACert),
			KeyFile: path.Join(poolerTLSMount, corev1.TLSPrivateKeyKey), Required: p.Spec.ClientTLS.Required},
		Parameters: params,
		Peers:      poolerPeers(p),
	}
}

// poolerConfigMap holds p's pgbouncer.ini, or says why it cannot be
// written (the API server refuses what the builder would, so an error
// means a spec that bypassed validation).
func poolerConfigMap(p *tuskv1alpha1.PostgresPooler) (*corev1.ConfigMap, error) {
	ini, err := pooler.INI(poolerConfig(p))
	if err != nil {
		return nil, fmt.Errorf("while configuring pooler %s: %w", p.Name, err)
	}
	return &corev1.ConfigMap{
		ObjectMeta: poolerObjectMeta(p, poolerConfigMapName(p)),
		Data:       map[string]string{poolerINI: ini},
	}, nil
}

// poolerStatefulSet runs p's pods: `tusk pooler` (copied from
// managerImage, as the PostgreSQL pods do) supervising PgBouncer (image).
// A StatefulSet, so each pod has a stable name, hence a peer_id (its
// ordinal + 1) and an address (through poolerPeersService) the other
// pods' [peers] section names. Pods start and stop in parallel: no pod
// waits for another. A rolling update replaces one pod at a time,
// newest ordinal first, the next only once the new one has been ready for
// poolerMinReadySeconds;
// inputsHash (the configuration and certificates) in the pod template
// rolls the pods when they change.
func poolerStatefulSet(p *tuskv1alpha1.PostgresPooler, image, managerImage, inputsHash string) *appsv1.StatefulSet {
	annotations := map[string]string{AnnotationPoolerInputs: inputsHash}
	for k, v := range prometheusAnnotations {
		annotations[k] = v
	}
	return &appsv1.StatefulSet{
		ObjectMeta: poolerObjectMeta(p, p.Name),
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(p.Spec.Instances),
			Selector:            &metav1.LabelSelector{MatchLabels: poolerSelector(p)},
			ServiceName:         poolerPeersServiceName(p),
			PodManagementPolicy: appsv1.ParallelPodManagement,
			MinReadySeconds:     poolerMinReadySeconds,
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To[int32](0)}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: poolerPodLabels(p), Annotations: annotations},
				Spec:       poolerPodSpec(p, image, managerImage),
			},
		},
	}
}

// poolerMinReadySeconds is how long a new pod of a rolling update is
// ready before the next pod stops: time for every node's Service routing
// to add it. A StatefulSet cannot start the new pod before the old one
// stops (a Deployment's surge), so without it the next pod to stop could
// be the only one the routing knows, and take new connections while it
// shuts down (measured: one ordinary client's connection refused by a
// stopping PgBouncer in two of three e2e runs).
const poolerMinReadySeconds = 5

// AnnotationPoolerInputs is the hash of what a pooler's pods read from
// their volumes (pgbouncer.ini, the certificates): a change rolls them.
const AnnotationPoolerInputs = "tusk.dev/pooler-inputs"

func poolerPodSpec(p *tuskv1alpha1.PostgresPooler, image, managerImage string) corev1.PodSpec {
	return corev1.PodSpec{
		InitContainers: []corev1.Container{bootstrapContainer(managerImage)},
		Containers:     []corev1.Container{poolerContainer(p, image)},
		Volumes: []corev1.Volume{
			{Name: "tusk-bin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			configMapVolume("config", poolerConfigMapName(p)),
			secretVolume("pooler-tls", poolerTLSSecretName(p)),
			secretVolume("pooler-auth-tls", poolerAuthSecretName(p)),
			{Name: "run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
		// fsGroup makes the mounted keys readable by PgBouncer's group.
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:   ptr.To(true),
			RunAsUser:      ptr.To[int64](poolerUser),
			RunAsGroup:     ptr.To[int64](poolerUser),
			FSGroup:        ptr.To[int64](poolerUser),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Affinity:                      poolerAffinity(p),
		TerminationGracePeriodSeconds: ptr.To[int64](terminationGracePeriod),
		EnableServiceLinks:            ptr.To(false),
		AutomountServiceAccountToken:  ptr.To(false),
	}
}

// poolerArgs are `tusk pooler`'s flags, the paths the volumes are at.
func poolerArgs() []string {
	return []string{
		"pooler",
		"--pgbouncer=" + poolerPgBouncer,
		"--config=" + path.Join(poolerConfigMount, poolerINI),
		"--run-dir=" + poolerRunDir,
		"--port=" + strconv.Itoa(poolerStatusPort),
		"--tls-cert=" + path.Join(poolerTLSMount, corev1.TLSCertKey),
		"--tls-key=" + path.Join(poolerTLSMount, corev1.TLSPrivateKeyKey),
		"--client-ca=" + path.Join(poolerTLSMount, keyPoolerClientCA),
		"--auth-cert=" + path.Join(poolerAuthMount, corev1.TLSCertKey),
	}
}

func poolerContainer(p *tuskv1alpha1.PostgresPooler, image string) corev1.Container {
	return corev1.Container{
		Name:            "pooler",
		Image:           image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         append([]string{instanceapi.ManagerBinary}, poolerArgs()...),
		Ports: []corev1.ContainerPort{
			{Name: "postgres", ContainerPort: postgresPort, Protocol: corev1.ProtocolTCP},
			{Name: "status", ContainerPort: poolerStatusPort, Protocol: corev1.ProtocolTCP},
		},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "tusk-bin", MountPath: binMount, ReadOnly: true},
			{Name: "config", MountPath: poolerConfigMount, ReadOnly: true},
			{Name: "pooler-tls", MountPath: poolerTLSMount, ReadOnly: true},
			{Name: "pooler-auth-tls", MountPath: poolerAuthMount, ReadOnly: true},
			{Name: "run", MountPath: poolerRunDir},
		},
		Resources:       p.Spec.Resources,
		SecurityContext: containerSecurityContext(),
		ReadinessProbe:  httpsProbe(poolerapi.PathReadyz, 5, 3),
		LivenessProbe:   httpsProbe(poolerapi.PathHealthz, 10, 6),
		// Kubernetes takes a stopping pod out of the Service as SIGTERM
		// goes out; the pause lets that reach every node first. PgBouncer
		// then answers SIGTERM by finishing its clients' work.
		Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
			Sleep: &corev1.SleepAction{Seconds: poolerDrainDelay},
		}},
	}
}

func configMapVolume(name, configMap string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: configMap},
	}}}
}

// poolerAffinity prefers one pooler pod per node: a node lost takes one
// pod's clients, not all.
func poolerAffinity(p *tuskv1alpha1.PostgresPooler) *corev1.Affinity {
	return &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight: 100, PodAffinityTerm: corev1.PodAffinityTerm{
				LabelSelector: &metav1.LabelSelector{MatchLabels: poolerSelector(p)},
				TopologyKey:   corev1.LabelHostname,
			},
		}},
	}}
}

// poolerService is the Service clients connect to: the pooler's name.
func poolerService(p *tuskv1alpha1.PostgresPooler) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: poolerObjectMeta(p, p.Name),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: poolerSelector(p),
			Ports: []corev1.ServicePort{{
				Name: "postgres", Port: postgresPort, TargetPort: intstr.FromString("postgres"), Protocol: corev1.ProtocolTCP,
			}},
		},
	}
}

// poolerPeersService is the StatefulSet's headless Service: a DNS name
// for each pod, which the other pods forward cancel requests to. It lists
// pods that are not ready too, so a pod that stops (readiness off first)
// still receives the cancels for the queries it finishes.
func poolerPeersService(p *tuskv1alpha1.PostgresPooler) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: poolerObjectMeta(p, poolerPeersServiceName(p)),
		Spec: corev1.ServiceSpec{
			Type:                     corev1.ServiceTypeClusterIP,
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
			Selector:                 poolerSelector(p),
			Ports: []corev1.ServicePort{{
				Name: "postgres", Port: postgresPort, TargetPort: intstr.FromString("postgres"), Protocol: corev1.ProtocolTCP,
			}},
		},
	}
}

// poolerPDB lets a drain take one pooler pod at a time. Like the
// cluster's, it is for two pods or more: with one it would block every
// drain of the node (the reconciler is to apply it only then).
func poolerPDB(p *tuskv1alpha1.PostgresPooler) *policyv1.PodDisruptionBudget {
	one := intstr.FromInt32(1)
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: poolerObjectMeta(p, p.Name),
		Spec: policyv1.PodDisruptionBudgetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: poolerSelector(p)},
			MaxUnavailable: &one,
		},
	}
}
