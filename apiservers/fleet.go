package apiservers

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/watchcache/watchcache-exporter/collector"
	"github.com/watchcache/watchcache-exporter/internal/promopts"
)

// fleetDesc describes one fleet series: a gauge by group and resource.
func fleetDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(promopts.Namespace, "", name), help, []string{"group", "resource"}, nil)
}

var (
	fleetWindow = fleetDesc("fleet_window_seconds",
		"History window that holds on every measured apiserver at once: now minus the time at which watchcache_fleet_oldest_resource_version was written. A client that may reconnect to any apiserver keeps its resourceVersion for this long. Only a lower bound where watchcache_fleet_window_lower_bound is 1.")
	fleetOldest = fleetDesc("fleet_oldest_resource_version",
		"The oldest resourceVersion every measured apiserver serves a watch from: the largest of their oldest resourceVersions.")
	fleetLower = fleetDesc("fleet_window_lower_bound",
		"1 when watchcache_fleet_window_seconds is only a lower bound (see watchcache_window_lower_bound).")
	fleetMembers = fleetDesc("fleet_window_apiservers",
		"Apiservers whose window of the resource is known, and so taken into the fleet's window; fewer than the apiservers measured while one does not answer.")
)

// fleetCollector exposes the fleet's window, computed at each scrape from
// the windows every measured apiserver knows.
type fleetCollector struct{ f *Fleet }

func (c fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{fleetWindow, fleetOldest, fleetLower, fleetMembers} {
		ch <- d
	}
}

func (c fleetCollector) Collect(ch chan<- prometheus.Metric) { c.CollectColumns(ch, nil) }

// CollectColumns collects the families keep says, or all for a nil keep:
// the status page plots two of the four (status.ColumnCollector).
func (c fleetCollector) CollectColumns(ch chan<- prometheus.Metric, keep func(*prometheus.Desc) bool) {
	for _, w := range FleetWindows(c.f.windows()) {
		for _, col := range [...]struct {
			d *prometheus.Desc
			v float64
		}{{fleetWindow, w.Seconds}, {fleetOldest, float64(w.Oldest)}, {fleetLower, w.LowerBoundValue()}, {fleetMembers, float64(w.Apiservers)}} {
			if keep == nil || keep(col.d) {
				ch <- prometheus.MustNewConstMetric(col.d, prometheus.GaugeValue, col.v, w.Group, w.Resource)
			}
		}
	}
}

// FleetWindow is one resource's window across apiservers.
type FleetWindow struct {
	collector.Window
	// Apiservers whose window went into it.
	Apiservers int
}

// FleetWindows combines the windows of each apiserver into the fleet's, one
// per resource, in no order. An RV is served by every apiserver only if it is at least
// each one's oldest: the fleet's oldest RV is the largest, and its window is
// the window of the apiserver that has it (the shortest; of equals, the
// shortest known one).
func FleetWindows(byAPIServer map[string][]collector.Window) []FleetWindow {
	fleet := map[[2]string]*FleetWindow{}
	for _, ws := range byAPIServer {
		for _, w := range ws {
			k := [2]string{w.Group, w.Resource}
			fw, ok := fleet[k]
			if !ok {
				fleet[k] = &FleetWindow{Window: w, Apiservers: 1}
				continue
			}
			fw.Apiservers++
			if w.Oldest > fw.Oldest || (w.Oldest == fw.Oldest && shorter(w, fw.Window)) {
				fw.Window = w
			}
		}
	}
	out := make([]FleetWindow, 0, len(fleet))
	for _, fw := range fleet {
		out = append(out, *fw)
	}
	return out
}

// shorter says whether a's window is known and shorter than b's.
func shorter(a, b collector.Window) bool {
	return !math.IsNaN(a.Seconds) && (math.IsNaN(b.Seconds) || a.Seconds < b.Seconds)
}
