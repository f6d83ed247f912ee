package postgres

import "testing"

func TestSynchronousStandbyNames(t *testing.T) {
	tests := []struct {
		name     string
		number   int
		standbys []string
		want     string
	}{
		{"quorum of one", 1, []string{"orders-3", "orders-2"}, `ANY 1 ("orders-2", "orders-3")`},
		{"sorted and de-duplicated", 2, []string{"c", "a", "b", "a", "c"}, `ANY 2 ("a", "b", "c")`},
		{"double quote doubled", 1, []string{`we"ird`, "first"}, `ANY 1 ("first", "we""ird")`},
		{"keyword-like names are quoted", 1, []string{"any", "first"}, `ANY 1 ("any", "first")`},
		{"more than listed is not capped", 3, []string{"a"}, `ANY 3 ("a")`},
		{"empty names dropped", 1, []string{"", "a", ""}, `ANY 1 ("a")`},
		{"zero is asynchronous", 0, []string{"a"}, ""},
		{"negative is asynchronous", -1, []string{"a"}, ""},
		{"no standbys", 1, nil, ""},
		{"only empty names", 1, []string{""}, ""},
	}
	for _, tt := range tests {
		if got := SynchronousStandbyNames(tt.number, tt.standbys); got != tt.want {
			t.Errorf("%s: got %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestSynchronousStandbyNamesLeavesInputAlone(t *testing.T) {
	in := []string{"b", "a", "b"}
	SynchronousStandbyNames(1, in)
	if in[0] != "b" || in[1] != "a" || in[2] != "b" {
		t.Errorf("input changed to %q", in)
	}
}
