package pgconf

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestReservedParametersMatchTheCRD keeps the renderer's reserved list and
// the CRD's validation rule identical: the CRD refuses a name at kubectl
// apply, the renderer drops it again, and a name in only one of them
// would be either silently dropped or let through to break the server.
func TestReservedParametersMatchTheCRD(t *testing.T) {
	crdList := reservedListInCRD(t)
	slices.Sort(crdList)
	if got := ReservedParameters(); !slices.Equal(got, crdList) {
		t.Errorf("reserved parameters differ from the CRD's rule (api/v1alpha1 PostgreSQLSpec.Parameters)\n pgconf: %q\n    CRD: %q", got, crdList)
	}
}

// reservedListInCRD finds the x-kubernetes-validations rule on
// spec.postgresql.parameters that refuses Tusk's names, and returns them.
func reservedListInCRD(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "config", "crd", "bases", "tusk.dev_postgresclusters.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema struct {
						Properties struct {
							Spec struct {
								Properties struct {
									PostgreSQL struct {
										Properties struct {
											Parameters struct {
												Validations []struct {
													Rule string `json:"rule"`
												} `json:"x-kubernetes-validations"`
											} `json:"parameters"`
										} `json:"properties"`
									} `json:"postgresql"`
								} `json:"properties"`
							} `json:"spec"`
						} `json:"properties"`
					} `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) == 0 {
		t.Fatal("the CRD has no versions")
	}
	const refusal = "].all(p, !(p in self))"
	for _, v := range crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties.Spec.Properties.PostgreSQL.Properties.Parameters.Validations {
		list, ok := strings.CutSuffix(v.Rule, refusal)
		if !ok || !strings.HasPrefix(list, "[") {
			continue
		}
		var names []string
		for _, m := range regexp.MustCompile(`'([^']*)'`).FindAllStringSubmatch(list, -1) {
			names = append(names, m[1])
		}
		if len(names) == 0 {
			t.Fatalf("no names found in the rule %q", v.Rule)
		}
		return names
	}
	t.Fatalf("no rule ending in %q on spec.postgresql.parameters in the CRD", refusal)
	return nil
}
