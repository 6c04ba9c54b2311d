package collector

import (
	"math"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/watchcache/watchcache-exporter/internal/promopts"
)

// value is one gauge of the table, NaN when it has no series.
func (t *gaugeTable) value(group, resource string, col int) float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if row := t.rows[[2]string{group, resource}]; row != nil && row[col].set {
		return row[col].v
	}
	return math.NaN()
}

// A table exposes what GaugeVecs of the same names would: a series per
// resource and gauge set, none for a gauge never set or a deleted row.
func TestGaugeTable(t *testing.T) {
	tab := newGaugeTable(promopts.Gauge("a_seconds", "A."), promopts.Gauge("b_total_things", "B."))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(tab)
	tab.set("", "pods", 0, 1.5)
	tab.set("", "pods", 1, math.NaN())
	tab.set("example.com", "widgets", 0, 2)
	tab.set("", "gone", 1, 3)
	tab.delete("", "gone")
	want := `
# HELP watchcache_a_seconds A.
# TYPE watchcache_a_seconds gauge
watchcache_a_seconds{group="",resource="pods"} 1.5
watchcache_a_seconds{group="example.com",resource="widgets"} 2
# HELP watchcache_b_total_things B.
# TYPE watchcache_b_total_things gauge
watchcache_b_total_things{group="",resource="pods"} NaN
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
