package metricsdoc

import (
	"strings"
	"testing"
)

func TestCatalogue(t *testing.T) {
	c := New("`:9/metrics`")
	c.Desc(Gauge, "b_bytes", "B's size | in bytes.", "x", "y")
	c.CounterVec("a_total", "As.", "z")
	c.HistogramVec("c_seconds", "Cs.", []float64{1}, "z")
	if got := c.Metrics(); len(got) != 3 || got[0].Name != "a_total" || got[1].Name != "b_bytes" || got[2].Kind != Histogram {
		t.Errorf("metrics %v, want both sorted by name", got)
	}
	md := Markdown("T", "Intro.", map[string]*Catalogue{"S": c})
	for _, want := range []string{"# T\n\nIntro.\n", "## S\n\nServed at `:9/metrics`.", "| `b_bytes` | gauge | `x`, `y` | B's size \\| in bytes. |"} {
		if !strings.Contains(md, want) {
			t.Errorf("the page lacks %q:\n%s", want, md)
		}
	}
}

func TestCatalogueRefusesADuplicate(t *testing.T) {
	c := New("x")
	c.Desc(Gauge, "a", "A.")
	defer func() {
		if recover() == nil {
			t.Error("a metric defined twice was accepted")
		}
	}()
	c.Desc(Counter, "a", "A again.")
}
