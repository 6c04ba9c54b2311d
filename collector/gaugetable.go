package collector

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// gaugeTable is a set of gauges that share the labels group and resource,
// kept as one row of values per resource and exposed when collected. With
// --resources=all there are thousands of resources on each apiserver: a row
// costs a few dozen bytes, where a GaugeVec keeps about 550 per series.
type gaugeTable struct {
	descs []*prometheus.Desc

	mu   sync.Mutex
	rows map[[2]string][]cell // by group, resource
}

// cell is one gauge's value; a gauge never set has no series.
type cell struct {
	v   float64
	set bool
}

// newGaugeTable makes a table of one column per gauge, in the order given.
func newGaugeTable(gauges ...prometheus.GaugeOpts) *gaugeTable {
	t := &gaugeTable{rows: map[[2]string][]cell{}}
	for _, o := range gauges {
		t.descs = append(t.descs, prometheus.NewDesc(prometheus.BuildFQName(o.Namespace, o.Subsystem, o.Name), o.Help, []string{"group", "resource"}, o.ConstLabels))
	}
	return t
}

// set sets column col of a resource's row.
func (t *gaugeTable) set(group, resource string, col int, v float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := [2]string{group, resource}
	row := t.rows[k]
	if row == nil {
		row = make([]cell, len(t.descs))
		t.rows[k] = row
	}
	row[col] = cell{v, true}
}

// delete removes a resource's row: every gauge's series of it.
func (t *gaugeTable) delete(group, resource string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.rows, [2]string{group, resource})
}

func (t *gaugeTable) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range t.descs {
		ch <- d
	}
}

func (t *gaugeTable) Collect(ch chan<- prometheus.Metric) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, row := range t.rows {
		for i, c := range row {
			if c.set {
				ch <- prometheus.MustNewConstMetric(t.descs[i], prometheus.GaugeValue, c.v, k[0], k[1])
			}
		}
	}
}
