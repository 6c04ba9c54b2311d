package collector

import (
	"fmt"
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
	if r := t.rows[[2]string{group, resource}]; r != nil && r.cells[col].set {
		return r.cells[col].v
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

// With constant labels (an apiserver's), each series carries them among its
// own, sorted, as a pedantic registry checks, and scrape after scrape.
func TestGaugeTableLabels(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	tab := tables{reg: &recordingRegisterer{Registerer: reg}, labels: prometheus.Labels{"apiserver": "a", "zone": "z"}}.
		newGaugeTable(promopts.Gauge("a_seconds", "A."))
	tab.set("", "pods", 0, 1.5)
	tab.set("example.com", "widgets", 0, 2)
	want := `
# HELP watchcache_a_seconds A.
# TYPE watchcache_a_seconds gauge
watchcache_a_seconds{apiserver="a",group="",resource="pods",zone="z"} 1.5
watchcache_a_seconds{apiserver="a",group="example.com",resource="widgets",zone="z"} 2
`
	for range 2 {
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
			t.Error(err)
		}
	}
}

func BenchmarkGaugeTableGather(b *testing.B) {
	reg := prometheus.NewRegistry()
	tab := tables{reg: &recordingRegisterer{Registerer: reg}, labels: prometheus.Labels{"apiserver": "a"}}.
		newGaugeTable(promopts.Gauge("a_seconds", "A."), promopts.Gauge("b_seconds", "B."))
	for i := range 1000 {
		tab.set("example.com", fmt.Sprintf("widget%04ds", i), 0, 1)
		tab.set("example.com", fmt.Sprintf("widget%04ds", i), 1, 2)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
