package plugin

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

func ptr[T any](v T) *T { return &v }

// healthyCluster is a settled 3-instance cluster as the operator reports
// it: orders-1 primary, two streaming replicas.
func healthyCluster() *tuskv1alpha1.PostgresCluster {
	at := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	return &tuskv1alpha1.PostgresCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop"},
		Spec: tuskv1alpha1.PostgresClusterSpec{
			Instances: 3,
			PostgreSQL: tuskv1alpha1.PostgreSQLSpec{Synchronous: tuskv1alpha1.SynchronousSpec{
				Mode: tuskv1alpha1.SynchronousQuorum, Number: 1, WhenTooFewStandbys: tuskv1alpha1.StandbyShortageDegrade,
			}},
		},
		Status: tuskv1alpha1.PostgresClusterStatus{
			Phase:          tuskv1alpha1.ClusterPhaseHealthy,
			CurrentPrimary: "orders-1",
			TargetPrimary:  "orders-1",
			ReadyInstances: 3,
			Instances: []tuskv1alpha1.InstanceStatus{
				{Name: "orders-1", Role: tuskv1alpha1.RolePrimary, Ready: true, LSN: "0/5000060", Timeline: 1, Phase: "Running"},
				{Name: "orders-2", Role: tuskv1alpha1.RoleReplica, Ready: true, LSN: "0/5000060", LagBytes: ptr[int64](0), Timeline: 1, Phase: "Running"},
				{Name: "orders-3", Role: tuskv1alpha1.RoleReplica, Ready: true, LSN: "0/4000000", LagBytes: ptr[int64](16<<20 + 96), Timeline: 1, Phase: "Running"},
			},
			Conditions: []metav1.Condition{
				{Type: tuskv1alpha1.ConditionProgressing, Status: metav1.ConditionFalse, Reason: tuskv1alpha1.ReasonUpToDate, Message: "Every instance runs the current spec", LastTransitionTime: at},
				{Type: tuskv1alpha1.ConditionDegraded, Status: metav1.ConditionFalse, Reason: tuskv1alpha1.ReasonAllInstancesReady, Message: "Every instance is ready", LastTransitionTime: at},
				{Type: tuskv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: tuskv1alpha1.ReasonClusterReady, Message: "The primary and every instance are ready", LastTransitionTime: at},
			},
		},
	}
}

// switchingCluster is healthyCluster half-way through a switchover to
// orders-2: orders-1 has stepped down and restarts as a replica.
func switchingCluster() *tuskv1alpha1.PostgresCluster {
	c := healthyCluster()
	st := &c.Status
	st.Phase, st.TargetPrimary, st.ReadyInstances = tuskv1alpha1.ClusterPhaseSwitchingOver, "orders-2", 2
	st.Instances[0] = tuskv1alpha1.InstanceStatus{Name: "orders-1", Role: tuskv1alpha1.RoleReplica, LSN: "0/50000D8", Timeline: 1, Phase: "Starting"}
	st.Conditions[0].Status, st.Conditions[0].Reason, st.Conditions[0].Message = metav1.ConditionTrue, tuskv1alpha1.ReasonSwitchingOver, "Switching the primary from orders-1 to orders-2"
	st.Conditions[1].Status, st.Conditions[1].Reason, st.Conditions[1].Message = metav1.ConditionTrue, tuskv1alpha1.ReasonInstancesNotReady, "Not ready: [orders-1 (Starting)]"
	st.Conditions[2].Status, st.Conditions[2].Reason, st.Conditions[2].Message = metav1.ConditionFalse, tuskv1alpha1.ReasonSwitchingOver, "Switching the primary from orders-1 to orders-2"
	return c
}

// degradedCluster has a replica that keeps crashing, with a long,
// multi-line message, and asynchronous replication.
func degradedCluster() *tuskv1alpha1.PostgresCluster {
	c := healthyCluster()
	c.Spec.PostgreSQL.Synchronous = tuskv1alpha1.SynchronousSpec{Mode: tuskv1alpha1.SynchronousOff}
	st := &c.Status
	st.Phase, st.ReadyInstances = tuskv1alpha1.ClusterPhaseDegraded, 2
	st.Instances[2] = tuskv1alpha1.InstanceStatus{Name: "orders-3", Role: tuskv1alpha1.RoleReplica, Timeline: 1, Phase: "Crashed",
		Message: "postgres exited with status 1:\nFATAL:  could not map anonymous shared memory: Cannot allocate memory\nHINT:  This error usually means that PostgreSQL's request for a shared memory segment exceeded available memory, swap space, or huge pages."}
	st.Conditions[1].Status, st.Conditions[1].Reason, st.Conditions[1].Message = metav1.ConditionTrue, tuskv1alpha1.ReasonInstancesNotReady, "Not ready: [orders-3 (Crashed)]"
	st.Conditions[2].Status, st.Conditions[2].Reason, st.Conditions[2].Message = metav1.ConditionFalse, tuskv1alpha1.ReasonInstancesNotReady, "Not ready: [orders-3 (Crashed)]"
	return c
}

// upgradeFailedCluster is healthyCluster after a failed major upgrade.
func upgradeFailedCluster() *tuskv1alpha1.PostgresCluster {
	c := healthyCluster()
	c.Spec.Image = "postgres:17"
	c.Status.PostgresMajor = 15
	c.Status.MajorUpgrade = &tuskv1alpha1.MajorUpgradeStatus{
		Attempt: "17-1795780800", FromImage: "postgres:15", ToImage: "postgres:17", FromMajor: 15, ToMajor: 17, Mode: "link",
		Phase:     tuskv1alpha1.MajorUpgradeFailed,
		StartedAt: metav1.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC),
		Message:   "The upgrade failed at the pre-checks: prepared transactions are open: pending (database app); commit or roll them back first; the old data directory is back in place; the cluster runs postgres:15 again",
	}
	return c
}

func importingCluster() *tuskv1alpha1.PostgresCluster {
	c := healthyCluster()
	c.Status.Import = &tuskv1alpha1.ImportStatus{Phase: tuskv1alpha1.ImportReplicating,
		Message: "following the source: database app by subscription tusk_import_06bf98cd8f2a"}
	return c
}

// upgradedCluster finished an in-place upgrade that took a backup first.
func upgradedCluster() *tuskv1alpha1.PostgresCluster {
	c := upgradeFailedCluster()
	c.Status.PostgresMajor = 17
	u := c.Status.MajorUpgrade
	u.Phase, u.Message, u.Backup = tuskv1alpha1.MajorUpgradeSucceeded, "PostgreSQL 17 serves", "orders-pre-upgrade-17"
	return c
}

// servedCluster's logical import into orders-18 was cut over.
func servedCluster() *tuskv1alpha1.PostgresCluster {
	c := healthyCluster()
	c.Status.ServedBy = "orders-18"
	return c
}
