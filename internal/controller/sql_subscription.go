package controller

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
	"tusk.dev/tusk/internal/instanceapi"
)

// defaultSlotLagThreshold is a subscription's spec.slotLagThreshold when
// unset.
var defaultSlotLagThreshold = resource.MustParse("1Gi")

func subscriptionKind() sqlKind {
	sub := func(o client.Object) *tuskv1alpha1.PostgresSubscription {
		return o.(*tuskv1alpha1.PostgresSubscription)
	}
	return sqlKind{
		name: "PostgresSubscription", path: instanceapi.PathSQLSubscriptions,
		newObject: func() client.Object { return &tuskv1alpha1.PostgresSubscription{} },
		newList:   func() client.ObjectList { return &tuskv1alpha1.PostgresSubscriptionList{} },
		status:    func(o client.Object) *tuskv1alpha1.SQLObjectStatus { return &sub(o).Status },
		cluster:   func(o client.Object) string { return sub(o).Spec.Cluster.Name },
		sqlName:   func(o client.Object) string { return sub(o).Spec.Database + "/" + sub(o).Spec.Name },
		sourceCluster: func(o client.Object) string {
			if src := sub(o).Spec.Source.Cluster; src != nil {
				return src.Name
			}
			return ""
		},
		secrets: func(o client.Object) []string {
			var names []string
			if s := sub(o).Spec.Source.RoleSecret; s != nil {
				names = append(names, s.Name)
			}
			if s := sub(o).Spec.Source.ConnectionSecret; s != nil {
				names = append(names, s.Name)
			}
			return names
		},
		dropsOnDelete: func(client.Object) bool { return true },
		request: func(ctx context.Context, r *SQLReconciler, o client.Object, c *tuskv1alpha1.PostgresCluster) (any, error) {
			if err := subscriptionAllowed(c); err != nil {
				return nil, err
			}
			return r.subscriptionRequest(ctx, sub(o))
		},
		drop: func(ctx context.Context, r *SQLReconciler, o client.Object, _ *tuskv1alpha1.PostgresCluster) (any, error) {
			s := sub(o).Spec
			// The drop needs no connection string: PostgreSQL uses the one
			// in its catalog to drop the slot on the publisher.
			return instanceapi.SubscriptionRequest{Name: s.Name, Database: s.Database, Ensure: instanceapi.EnsureAbsent}, nil
		},
		observe: func(ctx context.Context, r *SQLReconciler, o client.Object, _ *tuskv1alpha1.PostgresCluster) {
			r.observeSlot(ctx, sub(o))
		},
	}
}

// minSubscriptionMajor is the first PostgreSQL major whose subscriptions
// apply as each table's owner. Before it they apply as their owner, a
// superuser, so the owner of any subscribed table could run code as
// superuser (a trigger ENABLE ALWAYS).
const minSubscriptionMajor = 16

// subscriptionAllowed refuses a subscription on a cluster whose data is
// older than minSubscriptionMajor, before asking its primary (which
// refuses it too, also when the operator does not know the major yet).
func subscriptionAllowed(c *tuskv1alpha1.PostgresCluster) error {
	major := c.Status.PostgresMajor
	if major == 0 || major >= minSubscriptionMajor {
		return nil
	}
	return refusedErrorf("the PostgresCluster %s runs PostgreSQL %d, whose subscriptions apply rows as their owner, a superuser, "+
		"so the owner of any subscribed table could run code as superuser (a trigger ENABLE ALWAYS): subscriptions need "+
		"PostgreSQL %d or later, which applies as each table's owner; upgrade the cluster first", c.Name, major, minSubscriptionMajor)
}

// subscriptionRequest builds the subscription's request, reading its
// publisher's Secrets and, for a Tusk publisher, its CA.
func (r *SQLReconciler) subscriptionRequest(ctx context.Context, s *tuskv1alpha1.PostgresSubscription) (instanceapi.SubscriptionRequest, error) {
	spec := s.Spec
	req := instanceapi.SubscriptionRequest{Name: spec.Name, Database: spec.Database, Ensure: instanceapi.EnsurePresent,
		Publications: spec.Publications, Enabled: spec.Enabled}
	if sel := spec.Source.ConnectionSecret; sel != nil {
		conninfo, err := r.secretKey(ctx, s.Namespace, sel.Name, sel.Key)
		req.ConnInfo = conninfo
		return req, err
	}
	publisher := &tuskv1alpha1.PostgresCluster{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: spec.Source.Cluster.Name}, publisher); err != nil {
		return req, sourceErrorf("the publisher PostgresCluster %s cannot be read: %s", spec.Source.Cluster.Name, err.Error())
	}
	ca := &corev1.ConfigMap{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: caConfigMapName(publisher)}, ca); err != nil || ca.Data[keyCACert] == "" {
		return req, sourceErrorf("the publisher %s has no CA ConfigMap %s with %s yet", publisher.Name, caConfigMapName(publisher), keyCACert)
	}
	user, err := r.secretKey(ctx, s.Namespace, spec.Source.RoleSecret.Name, "username")
	if err != nil {
		return req, err
	}
	password, err := r.secretKey(ctx, s.Namespace, spec.Source.RoleSecret.Name, "password")
	if err != nil {
		return req, err
	}
	database := spec.Source.Database
	if database == "" {
		database = spec.Database
	}
	req.ConnInfo = clusterConnInfo(publisher, database, user, password, spec.Name)
	req.CAPEM = ca.Data[keyCACert]
	return req, nil
}

// clusterConnInfo is a libpq connection string to a Tusk cluster's
// primary, through its read-write Service, verifying the server's
// certificate against the CA the instance manager writes to "$CA".
func clusterConnInfo(c *tuskv1alpha1.PostgresCluster, database, user, password, application string) string {
	host := rwServiceName(c) + "." + c.Namespace + ".svc"
	pairs := [][2]string{
		{"host", host}, {"port", strconv.Itoa(postgresPort)}, {"dbname", database}, {"user", user}, {"password", password},
		{"sslmode", "verify-full"}, {"sslrootcert", "$CA"}, {"application_name", application},
	}
	parts := make([]string, len(pairs))
	for i, p := range pairs {
		parts[i] = p[0] + "=" + conninfoQuote(p[1])
	}
	return strings.Join(parts, " ")
}

// conninfoQuote quotes a libpq connection string value: single quotes,
// with backslash and quote escaped.
func conninfoQuote(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// observeSlot sets the subscription's SlotLagging condition from its slot
// on a Tusk publisher's primary. A slot that holds back more WAL than the
// threshold, or lost WAL, turns it true before pg_wal fills.
func (r *SQLReconciler) observeSlot(ctx context.Context, s *tuskv1alpha1.PostgresSubscription) {
	cond := metav1.Condition{Type: tuskv1alpha1.ConditionSlotLagging, Status: metav1.ConditionUnknown,
		Reason: tuskv1alpha1.ReasonSlotUnknown, ObservedGeneration: s.Generation}
	defer func() { meta.SetStatusCondition(&s.Status.Conditions, cond) }()
	if s.Spec.Source.Cluster == nil {
		cond.Message = "the publisher is not a Tusk cluster: its slot is not watched"
		return
	}
	slots, err := r.publisherSlots(ctx, s)
	if err != nil {
		cond.Message = err.Error()
		return
	}
	threshold := defaultSlotLagThreshold
	if s.Spec.SlotLagThreshold != nil {
		threshold = *s.Spec.SlotLagThreshold
	}
	cond.Status, cond.Reason, cond.Message = slotLagging(slots, s.Spec.Name, threshold.Value())
}

// slotLagging judges a subscription's slot among a publisher's slots.
func slotLagging(slots instanceapi.SlotsStatus, name string, threshold int64) (metav1.ConditionStatus, string, string) {
	for _, slot := range slots.Slots {
		if slot.Name != name {
			continue
		}
		held := resource.NewQuantity(slot.RetainedBytes, resource.BinarySI).String()
		switch {
		case slot.WALStatus == "lost":
			return metav1.ConditionTrue, tuskv1alpha1.ReasonSlotLagging, fmt.Sprintf("the publisher removed WAL the slot %s needs: "+
				"the subscription cannot continue; drop and create it again (it copies the tables afresh)", name)
		case slot.RetainedBytes > threshold:
			return metav1.ConditionTrue, tuskv1alpha1.ReasonSlotLagging, fmt.Sprintf("the slot %s holds back %s of WAL on the publisher, "+
				"more than %s: the subscriber is not keeping up, or is disabled", name, held, resource.NewQuantity(threshold, resource.BinarySI))
		default:
			return metav1.ConditionFalse, tuskv1alpha1.ReasonSlotWithinLimit, fmt.Sprintf("the slot %s holds back %s of WAL on the publisher", name, held)
		}
	}
	return metav1.ConditionUnknown, tuskv1alpha1.ReasonSlotUnknown, fmt.Sprintf("the publisher's primary has no slot %s (yet)", name)
}

// publisherSlots asks the publisher's primary for its logical slots.
func (r *SQLReconciler) publisherSlots(ctx context.Context, s *tuskv1alpha1.PostgresSubscription) (instanceapi.SlotsStatus, error) {
	var slots instanceapi.SlotsStatus
	publisher := &tuskv1alpha1.PostgresCluster{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Spec.Source.Cluster.Name}, publisher); err != nil {
		return slots, fmt.Errorf("while reading the publisher %s: %w", s.Spec.Source.Cluster.Name, err)
	}
	pod, why, err := r.primaryPod(ctx, publisher)
	if err != nil || pod == nil {
		return slots, fmt.Errorf("the publisher's slot is not known: %s", errString(err, why))
	}
	ic, err := r.instanceClient(ctx, publisher)
	if err != nil || ic == nil {
		return slots, fmt.Errorf("the publisher's slot is not known: %s", errString(err, "its CA Secret does not exist"))
	}
	callCtx, cancel := context.WithTimeout(ctx, backupCallTimeout)
	defer cancel()
	err = ic.call(callCtx, pod, http.MethodGet, instanceapi.PathSQLSlots, nil, &slots)
	return slots, err
}
