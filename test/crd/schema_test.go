package crd

import (
	"os"
	"path/filepath"
	"sort"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

func loadCRDs(t *testing.T) []apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "config", "crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs under config/crd/bases (run make manifests): %v", err)
	}
	crds := make([]apiextensionsv1.CustomResourceDefinition, 0, len(files))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(data, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		crds = append(crds, crd)
	}
	return crds
}

// undescribed returns the paths of schema properties without a description,
// so `kubectl explain` has something to say about every field.
func undescribed(path string, s *apiextensionsv1.JSONSchemaProps) []string {
	var missing []string
	names := make([]string, 0, len(s.Properties))
	for name := range s.Properties {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		prop := s.Properties[name]
		if prop.Description == "" {
			missing = append(missing, path+"."+name)
		}
		missing = append(missing, undescribed(path+"."+name, &prop)...)
	}
	if s.Items != nil && s.Items.Schema != nil {
		missing = append(missing, undescribed(path+"[]", s.Items.Schema)...)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		missing = append(missing, undescribed(path+"{}", s.AdditionalProperties.Schema)...)
	}
	return missing
}

func TestEveryFieldIsDescribed(t *testing.T) {
	for _, crd := range loadCRDs(t) {
		for _, v := range crd.Spec.Versions {
			root := v.Schema.OpenAPIV3Schema.DeepCopy()
			// The API server documents ObjectMeta itself; CRDs carry only
			// "type: object" for it.
			delete(root.Properties, "metadata")
			for _, path := range undescribed(crd.Spec.Names.Kind, root) {
				t.Errorf("%s has no description: add a doc comment to its Go field", path)
			}
		}
	}
}

func TestNamesAndSubresources(t *testing.T) {
	want := map[string]string{"PostgresCluster": "pgc", "PostgresBackup": "pgb", "PostgresRole": "pgrole",
		"PostgresDatabase": "pgdb", "PostgresPublication": "pgpub", "PostgresSubscription": "pgsub", "PostgresPooler": "pgpooler"}
	crds := loadCRDs(t)
	if len(crds) != len(want) {
		t.Fatalf("got %d CRDs, want %d", len(crds), len(want))
	}
	for _, crd := range crds {
		kind := crd.Spec.Names.Kind
		if crd.Spec.Group != "tusk.dev" || crd.Spec.Scope != apiextensionsv1.NamespaceScoped {
			t.Errorf("%s: group %q scope %q, want tusk.dev Namespaced", kind, crd.Spec.Group, crd.Spec.Scope)
		}
		if got := crd.Spec.Names.ShortNames; len(got) != 1 || got[0] != want[kind] {
			t.Errorf("%s: short names %v, want [%s]", kind, got, want[kind])
		}
		v := crd.Spec.Versions[0]
		if v.Subresources == nil || v.Subresources.Status == nil {
			t.Errorf("%s: no status subresource", kind)
		}
	}
}

func TestClusterScaleSubresourceAndColumns(t *testing.T) {
	for _, crd := range loadCRDs(t) {
		if crd.Spec.Names.Kind != "PostgresCluster" {
			continue
		}
		v := crd.Spec.Versions[0]
		scale := v.Subresources.Scale
		if scale == nil || scale.SpecReplicasPath != ".spec.instances" {
			t.Fatalf("scale subresource %+v, want specReplicasPath .spec.instances", scale)
		}
		var columns []string
		for _, c := range v.AdditionalPrinterColumns {
			columns = append(columns, c.Name)
		}
		want := []string{"Instances", "Ready", "Primary", "Phase", "Age"}
		if len(columns) != len(want) {
			t.Fatalf("printer columns %v, want %v", columns, want)
		}
		for i := range want {
			if columns[i] != want[i] {
				t.Errorf("printer column %d is %q, want %q", i, columns[i], want[i])
			}
		}
		return
	}
	t.Fatal("no PostgresCluster CRD")
}
