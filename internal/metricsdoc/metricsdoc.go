// Package metricsdoc describes each of Tusk's metrics once: the code that
// exports a metric takes its descriptor from here, and docs/metrics.md is
// rendered from the same entries, so the catalogue cannot drift from what
// is served.
package metricsdoc

import (
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Kind is a metric's Prometheus type.
type Kind string

// The kinds Tusk exports.
const (
	Counter   Kind = "counter"
	Gauge     Kind = "gauge"
	Histogram Kind = "histogram"
)

// Metric is one metric of the catalogue.
type Metric struct {
	Name   string
	Kind   Kind
	Help   string
	Labels []string
}

// Catalogue is the metrics one endpoint serves.
type Catalogue struct {
	// Endpoint says where the metrics are served, for the reader.
	Endpoint string
	metrics  []Metric
}

// New returns an empty catalogue of the metrics served at endpoint.
func New(endpoint string) *Catalogue {
	return &Catalogue{Endpoint: endpoint}
}

// Desc adds a metric and returns its descriptor, for a Collector.
func (c *Catalogue) Desc(kind Kind, name, help string, labels ...string) *prometheus.Desc {
	c.add(Metric{Name: name, Kind: kind, Help: help, Labels: labels})
	return prometheus.NewDesc(name, help, labels, nil)
}

// CounterVec adds a counter and returns it.
func (c *Catalogue) CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c.add(Metric{Name: name, Kind: Counter, Help: help, Labels: labels})
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// GaugeVec adds a gauge and returns it.
func (c *Catalogue) GaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	c.add(Metric{Name: name, Kind: Gauge, Help: help, Labels: labels})
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

// HistogramVec adds a histogram with the given bucket bounds and returns it.
func (c *Catalogue) HistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	c.add(Metric{Name: name, Kind: Histogram, Help: help, Labels: labels})
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
}

func (c *Catalogue) add(m Metric) {
	if slices.ContainsFunc(c.metrics, func(o Metric) bool { return o.Name == m.Name }) {
		panic(fmt.Sprintf("metric %s is defined twice", m.Name))
	}
	c.metrics = append(c.metrics, m)
}

// Metrics returns the catalogue's metrics, sorted by name.
func (c *Catalogue) Metrics() []Metric {
	out := slices.Clone(c.metrics)
	slices.SortFunc(out, func(a, b Metric) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Markdown renders catalogues as tables, one section each, under title.
func Markdown(title, intro string, sections map[string]*Catalogue) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n%s\n", title, strings.TrimSpace(intro))
	names := make([]string, 0, len(sections))
	for name := range sections {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		c := sections[name]
		fmt.Fprintf(&b, "\n## %s\n\nServed at %s.\n\n", name, c.Endpoint)
		b.WriteString("| metric | type | labels | meaning |\n|---|---|---|---|\n")
		for _, m := range c.Metrics() {
			labels := make([]string, len(m.Labels))
			for i, l := range m.Labels {
				labels[i] = "`" + l + "`"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", m.Name, m.Kind, strings.Join(labels, ", "), strings.ReplaceAll(m.Help, "|", `\|`))
		}
	}
	return b.String()
}
