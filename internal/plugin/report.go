package plugin

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// redacted replaces every secret value in the report.
const redacted = "[REDACTED]"

type reportOptions struct {
	*options
	output            string
	since             time.Duration
	operatorNamespace string
	now               func() time.Time
}

func newReportCommand(o *options) *cobra.Command {
	ro := &reportOptions{options: o, now: time.Now}
	cmd := &cobra.Command{
		Use:   "report CLUSTER",
		Short: "Write a support bundle of a cluster (a zip, every secret redacted)",
		Long: `Report writes a zip with what it takes to understand a cluster's trouble: the
PostgresCluster, its PostgresBackups, its pods (with their status), volumes,
Services, ConfigMaps (the rendered configuration), budget and NetworkPolicy,
the Events about any of them, each running instance manager's own /status
(asked for in its pod, as kubectl exec does), the logs of every container of
its pods (the current and, after a restart, the previous one) and the
operator's log lines about the cluster, for the last --since.

Secrets are listed by name, type and keys, never with their values. Every
value of the cluster's Secrets (passwords, keys, object store credentials)
that the user may read is replaced by [REDACTED] wherever it appears, as are
private keys, SCRAM verifiers and passwords in connection strings. Read the
bundle before you share it all the same: README.txt says what it holds and
what could not be read.`,
		Example: `  kubectl tusk report orders
  kubectl tusk report orders --since 6h -o orders.zip`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return ro.run(cmd.Context(), args[0])
		},
	}
	cmd.Flags().StringVarP(&ro.output, "output", "o", "", "the zip to write (CLUSTER-report-YYYYMMDD-HHMMSS.zip when empty)")
	cmd.Flags().DurationVar(&ro.since, "since", time.Hour, "how far back the logs go")
	cmd.Flags().StringVar(&ro.operatorNamespace, "operator-namespace", "tusk-system", "where the operator runs (its log lines about the cluster are included)")
	return cmd
}

// bundle is the report being written: files by path, and notes for the
// README about what could not be read.
type bundle struct {
	files map[string][]byte
	notes []string
	// objects are the kinds and names of the objects written, whose
	// Events the report includes.
	objects map[string]bool
}

func (b *bundle) add(path string, data []byte) { b.files[path] = data }

func (b *bundle) note(format string, args ...any) {
	b.notes = append(b.notes, fmt.Sprintf(format, args...))
}

func (ro *reportOptions) run(ctx context.Context, name string) error {
	c, ns, err := ro.client()
	if err != nil {
		return err
	}
	cfg, err := ro.configFlags.ToRESTConfig()
	if err != nil {
		return err
	}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	cluster, err := getCluster(ctx, c, ns, name)
	if err != nil {
		return err
	}
	now := ro.now().UTC()
	b := &bundle{files: map[string][]byte{}, objects: map[string]bool{}}
	b.addObject(c, "cluster.yaml", cluster)
	pods, sqlObjects := ro.addClusterObjects(ctx, c, b, cluster)
	secrets := ro.addSecretNames(ctx, c, b, cluster, append(namedSecrets(cluster), sqlObjectSecrets(sqlObjects)...))
	ro.addEvents(ctx, c, b, cluster)
	ro.addLogs(ctx, clientset, b, cluster, pods)
	ro.addInstanceStatuses(ctx, cfg, clientset, b, pods)
	b.add("README.txt", readme(cluster, ro.since, now, b.notes))
	redact(b, secrets)

	out := ro.output
	if out == "" {
		out = fmt.Sprintf("%s-report-%s.zip", name, now.Format("20060102-150405"))
	}
	if err := writeZip(out, name+"-report", b.files); err != nil {
		return err
	}
	_, err = fmt.Fprintf(ro.streams.Out, "Wrote %s: %d files, logs since %s (see README.txt in it)\n",
		out, len(b.files), now.Add(-ro.since).Format(time.RFC3339))
	return err
}

// addObject writes obj as YAML with its kind, without managedFields.
func (b *bundle) addObject(c client.Client, path string, objs ...client.Object) {
	var buf bytes.Buffer
	for _, obj := range objs {
		obj.SetManagedFields(nil)
		if gvk, err := apiutil.GVKForObject(obj, c.Scheme()); err == nil {
			obj.GetObjectKind().SetGroupVersionKind(gvk)
			b.objects[gvk.Kind+"/"+obj.GetName()] = true
		}
		data, err := yaml.Marshal(obj)
		if err != nil {
			b.note("%s: %v", path, err)
			continue
		}
		buf.WriteString("---\n")
		buf.Write(data)
	}
	b.add(path, buf.Bytes())
}

// addClusterObjects writes the objects of the cluster by kind and returns
// its pods and its SQL objects.
func (ro *reportOptions) addClusterObjects(ctx context.Context, c client.Client, b *bundle, cluster *tuskv1alpha1.PostgresCluster) ([]corev1.Pod, []client.Object) {
	inCluster := []client.ListOption{client.InNamespace(cluster.Namespace), client.MatchingLabels{tuskv1alpha1.LabelCluster: cluster.Name}}
	var pods corev1.PodList
	lists := map[string]client.ObjectList{
		"pods.yaml":            &pods,
		"volumes.yaml":         &corev1.PersistentVolumeClaimList{},
		"services.yaml":        &corev1.ServiceList{},
		"configmaps.yaml":      &corev1.ConfigMapList{},
		"budgets.yaml":         &policyv1.PodDisruptionBudgetList{},
		"networkpolicies.yaml": &networkingv1.NetworkPolicyList{},
	}
	for path, list := range lists {
		if err := c.List(ctx, list, inCluster...); err != nil {
			b.note("%s: %v", path, err)
			continue
		}
		b.addObject(c, path, listItems(list)...)
	}
	var backups tuskv1alpha1.PostgresBackupList
	if err := c.List(ctx, &backups, client.InNamespace(cluster.Namespace)); err != nil {
		b.note("backups.yaml: %v", err)
	} else {
		var ofCluster []client.Object
		for i := range backups.Items {
			if backups.Items[i].Spec.Cluster.Name == cluster.Name {
				ofCluster = append(ofCluster, &backups.Items[i])
			}
		}
		b.addObject(c, "backups.yaml", ofCluster...)
	}
	sqlObjects := addSQLObjects(ctx, c, b, cluster)
	return pods.Items, sqlObjects
}

// addSQLObjects writes the cluster's declarative SQL objects (roles,
// databases, publications, subscriptions) with their conditions.
func addSQLObjects(ctx context.Context, c client.Client, b *bundle, cluster *tuskv1alpha1.PostgresCluster) []client.Object {
	var roles tuskv1alpha1.PostgresRoleList
	var databases tuskv1alpha1.PostgresDatabaseList
	var publications tuskv1alpha1.PostgresPublicationList
	var subscriptions tuskv1alpha1.PostgresSubscriptionList
	var ofCluster []client.Object
	add := func(o client.Object, name string) {
		if name == cluster.Name {
			ofCluster = append(ofCluster, o)
		}
	}
	for _, list := range []client.ObjectList{&roles, &databases, &publications, &subscriptions} {
		if err := c.List(ctx, list, client.InNamespace(cluster.Namespace)); err != nil {
			b.note("sql.yaml: %v", err)
		}
	}
	for i := range roles.Items {
		add(&roles.Items[i], roles.Items[i].Spec.Cluster.Name)
	}
	for i := range databases.Items {
		add(&databases.Items[i], databases.Items[i].Spec.Cluster.Name)
	}
	for i := range publications.Items {
		add(&publications.Items[i], publications.Items[i].Spec.Cluster.Name)
	}
	for i := range subscriptions.Items {
		add(&subscriptions.Items[i], subscriptions.Items[i].Spec.Cluster.Name)
	}
	b.addObject(c, "sql.yaml", ofCluster...)
	return ofCluster
}

// listItems returns a typed list's items as objects.
func listItems(list client.ObjectList) []client.Object {
	objs, err := meta.ExtractList(list)
	if err != nil {
		return nil
	}
	out := make([]client.Object, 0, len(objs))
	for _, o := range objs {
		if obj, ok := o.(client.Object); ok {
			out = append(out, obj)
		}
	}
	return out
}

// addSecretNames lists the cluster's Secrets and the ones its spec names,
// by name, type and keys, and returns every value in them, to redact.
func (ro *reportOptions) addSecretNames(ctx context.Context, c client.Client, b *bundle, cluster *tuskv1alpha1.PostgresCluster, named []string) [][]byte {
	var values [][]byte
	var listing strings.Builder
	seen := map[string]bool{}
	record := func(s *corev1.Secret) {
		if seen[s.Name] {
			return
		}
		seen[s.Name] = true
		keys := make([]string, 0, len(s.Data))
		for k, v := range s.Data {
			keys = append(keys, k)
			if !publicSecretKeys[k] {
				values = append(values, v)
			}
		}
		slices.Sort(keys)
		fmt.Fprintf(&listing, "%s (%s): %s\n", s.Name, s.Type, strings.Join(keys, ", "))
	}
	var secrets corev1.SecretList
	if err := c.List(ctx, &secrets, client.InNamespace(cluster.Namespace), client.MatchingLabels{tuskv1alpha1.LabelCluster: cluster.Name}); err != nil {
		b.note("secrets.txt: the cluster's Secrets could not be listed (%v): only the patterns below were redacted", err)
	}
	for i := range secrets.Items {
		record(&secrets.Items[i])
	}
	for _, name := range named {
		s := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: name}, s); err != nil {
			b.note("secrets.txt: Secret %s could not be read (%v): its values were not looked for", name, err)
			continue
		}
		record(s)
	}
	b.add("secrets.txt", []byte("# The cluster's Secrets: name (type): keys. Values are never included.\n"+listing.String()))
	return values
}

// publicSecretKeys are keys of the cluster's Secrets whose values are no
// secret and appear in logs as a matter of course (a role name such as
// postgres, a host name, a certificate): redacting them would blank out
// the logs. Every other value is redacted.
var publicSecretKeys = map[string]bool{
	"username": true, "user": true, "host": true, "port": true, "dbname": true, "database": true,
	"tls.crt": true, "ca.crt": true, "client-ca.crt": true,
}

// namedSecrets are the Secrets of the user's that the cluster's spec
// names: the superuser's and the owner's, the TLS CA, the object store's
// keys and CA, a recovery source's, an import source's password and CA.
func namedSecrets(c *tuskv1alpha1.PostgresCluster) []string {
	var names []string
	local := func(ref *corev1.LocalObjectReference) {
		if ref != nil && ref.Name != "" {
			names = append(names, ref.Name)
		}
	}
	key := func(ref *corev1.SecretKeySelector) {
		if ref != nil {
			local(&ref.LocalObjectReference)
		}
	}
	store := func(s *tuskv1alpha1.ObjectStoreSpec) {
		if s != nil {
			local(&corev1.LocalObjectReference{Name: s.CredentialsSecret.Name})
			key(s.CASecret)
		}
	}
	local(c.Spec.SuperuserSecret)
	if t := c.Spec.TLS; t != nil {
		local(t.CASecret)
	}
	if bk := c.Spec.Backup; bk != nil {
		store(&bk.ObjectStore)
	}
	if bs := c.Spec.Bootstrap; bs != nil {
		if bs.InitDB != nil {
			local(bs.InitDB.Secret)
			if imp := bs.InitDB.Import; imp != nil {
				key(&imp.Source.PasswordSecret)
				key(imp.Source.CASecret)
			}
		}
		if bs.Recovery != nil {
			store(bs.Recovery.Source)
		}
	}
	return names
}

// sqlObjectSecrets are the Secrets the cluster's SQL objects name: roles'
// passwords, subscriptions' roles and connection strings.
func sqlObjectSecrets(objs []client.Object) []string {
	var names []string
	for _, o := range objs {
		switch o := o.(type) {
		case *tuskv1alpha1.PostgresRole:
			if ref := o.Spec.PasswordSecret; ref != nil {
				names = append(names, ref.Name)
			}
		case *tuskv1alpha1.PostgresSubscription:
			if ref := o.Spec.Source.RoleSecret; ref != nil {
				names = append(names, ref.Name)
			}
			if ref := o.Spec.Source.ConnectionSecret; ref != nil {
				names = append(names, ref.Name)
			}
		}
	}
	return names
}

// addEvents writes the Events about the objects the report holds (the
// cluster, its pods, volumes, Services, backups...), oldest first.
func (ro *reportOptions) addEvents(ctx context.Context, c client.Client, b *bundle, cluster *tuskv1alpha1.PostgresCluster) {
	var events corev1.EventList
	if err := c.List(ctx, &events, client.InNamespace(cluster.Namespace)); err != nil {
		b.note("events.txt: %v", err)
		return
	}
	var lines []string
	for _, e := range events.Items {
		if !b.objects[e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name] {
			continue
		}
		at := e.LastTimestamp.Time
		if at.IsZero() {
			at = e.EventTime.Time
		}
		lines = append(lines, fmt.Sprintf("%s %s %s/%s %s (x%d): %s", at.UTC().Format(time.RFC3339), e.Type,
			e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, max(e.Count, 1), e.Message))
	}
	sort.Strings(lines)
	b.add("events.txt", []byte(strings.Join(lines, "\n")+"\n"))
}

// addLogs writes the logs of every container of the cluster's pods, and
// the operator's lines about the cluster, for the window.
func (ro *reportOptions) addLogs(ctx context.Context, cs kubernetes.Interface, b *bundle, cluster *tuskv1alpha1.PostgresCluster, pods []corev1.Pod) {
	since := int64(ro.since.Seconds())
	for _, p := range pods {
		for _, st := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
			path := fmt.Sprintf("logs/%s/%s.log", p.Name, st.Name)
			ro.addLog(ctx, cs, b, path, p.Namespace, p.Name, &corev1.PodLogOptions{Container: st.Name, SinceSeconds: &since}, nil)
			if st.RestartCount > 0 {
				ro.addLog(ctx, cs, b, fmt.Sprintf("logs/%s/%s.previous.log", p.Name, st.Name), p.Namespace, p.Name,
					&corev1.PodLogOptions{Container: st.Name, Previous: true}, nil)
			}
		}
		if len(p.Status.ContainerStatuses) == 0 {
			b.note("logs/%s: the pod has no container started (phase %s)", p.Name, p.Status.Phase)
		}
	}
	operators, err := cs.CoreV1().Pods(ro.operatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=tusk,app.kubernetes.io/component=operator"})
	if err != nil {
		b.note("operator logs: the operator's pods in %s could not be listed (%v)", ro.operatorNamespace, err)
		return
	}
	mentions := aboutCluster(cluster, b.objects)
	for _, p := range operators.Items {
		ro.addLog(ctx, cs, b, fmt.Sprintf("operator/%s.log", p.Name), p.Namespace, p.Name,
			&corev1.PodLogOptions{SinceSeconds: &since}, mentions)
	}
	if len(operators.Items) == 0 {
		b.note("operator logs: no operator pod in %s (--operator-namespace)", ro.operatorNamespace)
	}
}

// addLog writes one container's log, keeping only the lines keep accepts
// when it is not nil.
func (ro *reportOptions) addLog(ctx context.Context, cs kubernetes.Interface, b *bundle, path, ns, pod string, opts *corev1.PodLogOptions, keep func(string) bool) {
	stream, err := cs.CoreV1().Pods(ns).GetLogs(pod, opts).Stream(ctx)
	if err != nil {
		b.note("%s: %v", path, err)
		return
	}
	defer func() { _ = stream.Close() }()
	var buf bytes.Buffer
	scanner := bufio.NewScanner(stream)
	scanner.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for scanner.Scan() {
		if keep == nil || keep(scanner.Text()) {
			buf.Write(scanner.Bytes())
			buf.WriteByte('\n')
		}
	}
	if err := scanner.Err(); err != nil {
		b.note("%s: cut short: %v", path, err)
	}
	b.add(path, buf.Bytes())
}

// aboutCluster says whether an operator log line (JSON) is about the
// cluster or one of the objects the report holds: its namespace field is
// the cluster's namespace, and its controller's kind and its name (the
// object reconciled) are one of those objects (objects: "Kind/name"). A
// line that merely mentions both strings (another namespace's cluster, a
// message quoting them) is not: it could carry another tenant's data.
func aboutCluster(c *tuskv1alpha1.PostgresCluster, objects map[string]bool) func(string) bool {
	return func(line string) bool {
		var rec struct {
			Namespace      string `json:"namespace"`
			Name           string `json:"name"`
			ControllerKind string `json:"controllerKind"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			return false
		}
		return rec.Namespace == c.Namespace && objects[rec.ControllerKind+"/"+rec.Name]
	}
}

// secretPatterns are what is redacted whether or not the Secrets could be
// read: PEM private keys, SCRAM verifiers, passwords in connection strings
// and URIs.
var secretPatterns = []*regexp.Regexp{
	regexp.MustCompile(`(?s)-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----`),
	regexp.MustCompile(`SCRAM-SHA-256\$[0-9]+:[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+`),
	regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`),
	regexp.MustCompile(`(://[^:/@\s]+:)[^@\s]+@`),
}

// redact replaces every value of values (at least 4 bytes: shorter ones
// would blank out ordinary words) and every secret pattern in every file.
func redact(b *bundle, values [][]byte) {
	values = slices.DeleteFunc(slices.Clone(values), func(v []byte) bool { return len(bytes.TrimSpace(v)) < 4 })
	// Longest first: a value containing another is replaced whole.
	slices.SortFunc(values, func(x, y []byte) int { return len(y) - len(x) })
	for path, data := range b.files {
		for _, v := range values {
			data = bytes.ReplaceAll(data, bytes.TrimSpace(v), []byte(redacted))
		}
		data = secretPatterns[0].ReplaceAll(data, []byte(redacted))
		data = secretPatterns[1].ReplaceAll(data, []byte(redacted))
		data = secretPatterns[2].ReplaceAll(data, []byte("${1}"+redacted))
		data = secretPatterns[3].ReplaceAll(data, []byte("${1}"+redacted+"@"))
		b.files[path] = data
	}
}

// readme says what the bundle holds and what could not be read.
func readme(c *tuskv1alpha1.PostgresCluster, since time.Duration, now time.Time, notes []string) []byte {
	var s strings.Builder
	fmt.Fprintf(&s, "Support bundle of PostgresCluster %s/%s, written %s by kubectl tusk report.\n\n", c.Namespace, c.Name, now.Format(time.RFC3339))
	fmt.Fprintf(&s, "Logs since %s (--since %s).\n\n", now.Add(-since).Format(time.RFC3339), since)
	s.WriteString(`cluster.yaml         the PostgresCluster, status included
backups.yaml         its PostgresBackups
sql.yaml             its PostgresRoles, PostgresDatabases, PostgresPublications and PostgresSubscriptions
pods.yaml            its pods, with their status (what kubectl describe shows)
volumes.yaml, services.yaml, configmaps.yaml, budgets.yaml, networkpolicies.yaml
events.txt           Events about the cluster and its objects, oldest first
secrets.txt          its Secrets: names, types and keys only
logs/POD/CONTAINER.log            each container's log (.previous.log: before its last restart)
operator/POD.log     the operator's log lines that name the cluster

Every value of the Secrets listed in secrets.txt, every private key, SCRAM
verifier and password in a connection string is replaced by [REDACTED].
`)
	if len(notes) > 0 {
		s.WriteString("\nWhat could not be read:\n")
		sort.Strings(notes)
		for _, n := range notes {
			s.WriteString("- " + n + "\n")
		}
	}
	return []byte(s.String())
}

// writeZip writes files under dir in a new zip at path, which must not
// exist: a report never overwrites a file.
func writeZip(path, dir string, files map[string][]byte) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600) //nolint:gosec // the file the user asked for (-o)
	if err != nil {
		return fmt.Errorf("while creating the report: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(path)
		}
	}()
	zw := zip.NewWriter(f)
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		w, err := zw.Create(dir + "/" + p)
		if err != nil {
			return err
		}
		if _, err := io.Copy(w, bytes.NewReader(files[p])); err != nil {
			return err
		}
	}
	return zw.Close()
}
