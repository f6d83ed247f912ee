// Package v1alpha1 holds the Tusk API: PostgresCluster, PostgresBackup,
// the declarative SQL objects (PostgresRole, PostgresDatabase,
// PostgresPublication, PostgresSubscription) and PostgresPooler.
//
// It describes; it does not do. This package depends only on the Kubernetes
// API machinery, never on the rest of Tusk, so any client can import the API
// without pulling in the operator's internals.
//
// +kubebuilder:object:generate=true
// +groupName=tusk.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "tusk.dev", Version: "v1alpha1"}

	// SchemeBuilder registers this package's kinds with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds this package's kinds to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&PostgresCluster{}, &PostgresClusterList{},
		&PostgresBackup{}, &PostgresBackupList{},
		&PostgresRole{}, &PostgresRoleList{},
		&PostgresDatabase{}, &PostgresDatabaseList{},
		&PostgresPublication{}, &PostgresPublicationList{},
		&PostgresSubscription{}, &PostgresSubscriptionList{},
		&PostgresPooler{}, &PostgresPoolerList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
