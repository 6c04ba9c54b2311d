package collector

import (
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// gaugeTable is a set of gauges that share the labels group and resource,
// kept as one row of values per resource and exposed when collected. With
// --resources=all there are thousands of resources on each apiserver: a row
// costs a few dozen bytes, where a GaugeVec keeps about 550 per series.
type gaugeTable struct {
	descs  []*prometheus.Desc
	labels prometheus.Labels // the descriptors' constant labels

	mu   sync.Mutex
	rows map[[2]string]*row // by group, resource
}

// row is one resource's cells, and its label pairs, made once: a scrape of
// thousands of rows would otherwise make them again for every series.
type row struct {
	cells  []cell
	labels []*dto.LabelPair // sorted by name; shared by the row's series, read-only
}

// cell is one gauge's value; a gauge never set has no series.
type cell struct {
	v   float64
	set bool
}

// tables registers gaugeTables, each series with the Collector's constant
// labels in its descriptor, on the registerer those labels would otherwise
// wrap: a wrapped collector builds a new descriptor for every series it
// collects, which at 1000 resources x 3 apiservers was the largest share of
// the exporter's allocations (194 of 898 MB in 6 minutes, with the status
// page sampling every 5 s), and its largest transient heap at a scrape.
type tables struct {
	reg    *recordingRegisterer
	labels prometheus.Labels
}

// newGaugeTable makes and registers a table of one column per gauge.
func (t tables) newGaugeTable(gauges ...prometheus.GaugeOpts) *gaugeTable {
	for i := range gauges {
		cl := prometheus.Labels{}
		for k, v := range gauges[i].ConstLabels {
			cl[k] = v
		}
		for k, v := range t.labels {
			cl[k] = v
		}
		gauges[i].ConstLabels = cl
	}
	g := newGaugeTable(gauges...)
	t.reg.MustRegister(g)
	return g
}

// newGaugeTable makes a table of one column per gauge, in the order given.
func newGaugeTable(gauges ...prometheus.GaugeOpts) *gaugeTable {
	t := &gaugeTable{rows: map[[2]string]*row{}}
	for _, o := range gauges {
		t.descs = append(t.descs, prometheus.NewDesc(prometheus.BuildFQName(o.Namespace, o.Subsystem, o.Name), o.Help, []string{"group", "resource"}, o.ConstLabels))
	}
	if len(gauges) > 0 {
		t.labels = gauges[0].ConstLabels // the same on every column (tables)
	}
	return t
}

// labelPairs are a row's labels: the constant ones, group and resource.
func (t *gaugeTable) labelPairs(group, resource string) []*dto.LabelPair {
	pairs := []*dto.LabelPair{
		{Name: proto.String("group"), Value: proto.String(group)},
		{Name: proto.String("resource"), Value: proto.String(resource)},
	}
	for k, v := range t.labels {
		pairs = append(pairs, &dto.LabelPair{Name: proto.String(k), Value: proto.String(v)})
	}
	slices.SortFunc(pairs, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
	return slices.Clip(pairs)
}

// set sets column col of a resource's row.
func (t *gaugeTable) set(group, resource string, col int, v float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := [2]string{group, resource}
	r := t.rows[k]
	if r == nil {
		r = &row{cells: make([]cell, len(t.descs)), labels: t.labelPairs(group, resource)}
		t.rows[k] = r
	}
	r.cells[col] = cell{v, true}
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

func (t *gaugeTable) Collect(ch chan<- prometheus.Metric) { t.CollectColumns(ch, nil) }

// CollectColumns collects the columns keep says, or all for a nil keep: the
// status page plots two of the window table's four (status.ColumnCollector).
func (t *gaugeTable) CollectColumns(ch chan<- prometheus.Metric, keep func(*prometheus.Desc) bool) {
	want := make([]bool, len(t.descs))
	for i, d := range t.descs {
		want[i] = keep == nil || keep(d)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range t.rows {
		for i, c := range r.cells {
			if c.set && want[i] {
				ch <- cellMetric{desc: t.descs[i], v: c.v, labels: r.labels}
			}
		}
	}
}

// cellMetric is one series of a table, as collected.
type cellMetric struct {
	desc   *prometheus.Desc
	v      float64
	labels []*dto.LabelPair
}

func (m cellMetric) Desc() *prometheus.Desc { return m.desc }

func (m cellMetric) Write(out *dto.Metric) error {
	out.Label = m.labels
	out.Gauge = &dto.Gauge{Value: proto.Float64(m.v)}
	return nil
}
