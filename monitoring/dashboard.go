package monitoring

// The dashboard is described by the panels table below and built with
// Grafana's own SDK (grafana-foundation-sdk), whose types and validation
// follow Grafana's dashboard schema.

import (
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/heatmap"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
	"github.com/grafana/grafana-foundation-sdk/go/xychart"
)

type obj = map[string]any

// Selectors every query carries: the exporter, and the apiserver for the
// measurement series.
const (
	sel   = `job=~"$job",instance=~"$instance"`
	selAS = sel + `,apiserver=~"$apiserver"`
)

// quantile works on classic and native histograms alike: the classic
// buckets when the server stores them, the native histogram otherwise
// (a Prometheus with native histograms enabled stores only those).
func quantile(q, metric, selector, by string) string {
	return `histogram_quantile(` + q + `, sum by (` + by + `le) (rate(` + metric + `_bucket{` + selector + `}[$__rate_interval])))` +
		` or histogram_quantile(` + q + `, sum by (` + by + `) (rate(` + metric + `{` + selector + `}[$__rate_interval])))`
}

type target struct {
	expr, legend string
	heatmap      bool
	table        bool // an instant query in table format
}

type panel struct {
	title, description, kind, unit string
	w, h                           int
	targets                        []target
	// rightUnit puts the series whose legend starts with "rate" on a
	// right axis with this unit.
	rightUnit string
	// xy maps the x and y series of an xychart by their legends.
	xy        [2]string
	transform []dashboard.DataTransformerConfig
	// row starts a row of the panels after it; repeat repeats the row for
	// each value of that variable (none: no row).
	row    bool
	repeat string
}

// cm selects the ConfigMap measurement's window series among every
// resource's.
const cm = `,resource="configmaps"`

// selRes is selAS for the chosen resource.
const selRes = selAS + `,resource=~"$resource"`

func panels() []panel {
	return []panel{
		{title: "ConfigMaps: the measured load", row: true},
		{title: "History window against write rate", kind: "timeseries", unit: "s", rightUnit: "wps", w: 24, h: 9,
			description: "How long the watch cache keeps its history (measured per apiserver, and as the apiserver's sizing rules predict at the measured write rate), against the write rate on the right axis. A client disconnected for longer than the window must relist. The sawtooth between 75 s and 150 s, and the jump after a rate drop, are the cache's ring buffer doubling and halving.",
			targets: []target{
				{expr: `watchcache_window_seconds{` + selAS + cm + `}`, legend: "window {{apiserver}}"},
				{expr: `watchcache_predicted_window_seconds{` + selAS + `}`, legend: "predicted window {{apiserver}}"},
				{expr: `rate(watchcache_exporter_writes_total{` + sel + `}[$__rate_interval])`, legend: "rate: the exporter's writes/s"},
				{expr: `rate(watchcache_cluster_writes_total{` + sel + `}[$__rate_interval])`, legend: "rate: the cluster's writes/s"},
				{expr: `watchcache_load_target_writes_per_second{` + sel + `}`, legend: "rate: target writes/s"},
			}},
		{title: "Window against write rate (XY)", kind: "xychart", unit: "s", w: 12, h: 9,
			description: "Each point is one moment: the exporter's write rate (x) and the measured window (y). At steady rates the points lie on capacity/rate curves, one per ring-buffer size.",
			targets: []target{
				{expr: `max(rate(watchcache_exporter_writes_total{` + sel + `}[$__rate_interval]))`, legend: "writes/s"},
				{expr: `max(watchcache_window_seconds{` + selAS + cm + `})`, legend: "window"},
			},
			transform: []dashboard.DataTransformerConfig{{Id: "joinByField", Options: obj{"byField": "Time", "mode": "inner"}}},
			xy:        [2]string{"writes/s", "window"}},
		{title: "Window in resourceVersions", kind: "timeseries", unit: "short", w: 12, h: 9,
			description: "Newest RV minus the cache's oldest: the window counted in writes. With the exporter as the only ConfigMap writer it equals the cache's capacity, which estimated_capacity_events (its own writes in the window) bounds from below.",
			targets: []target{
				{expr: `watchcache_window_resource_versions{` + selAS + cm + `}`, legend: "window RVs {{apiserver}}"},
				{expr: `watchcache_estimated_capacity_events{` + selAS + `}`, legend: "estimated capacity {{apiserver}}"},
				{expr: `watchcache_predicted_capacity_events{` + selAS + `}`, legend: "predicted capacity {{apiserver}}"},
			}},
		{title: "Time to first 410", kind: "heatmap", unit: "s", w: 16, h: 9,
			description: "How long a resourceVersion stayed usable: from the touch that made it to the first 410 Gone when reconnecting from it. One observation per expiry cycle.",
			targets:     []target{{expr: `sum by (le) (increase(watchcache_expiry_seconds_bucket{` + selAS + `}[$__rate_interval])) or sum(increase(watchcache_expiry_seconds{` + selAS + `}[$__rate_interval]))`, legend: "{{le}}", heatmap: true}}},
		{title: "Time to first 410 (last cycle)", kind: "stat", unit: "s", w: 8, h: 9,
			description: "The last cycle's time to first 410, per apiserver.",
			targets:     []target{{expr: `watchcache_expiry_last_seconds{` + selAS + `}`, legend: "{{apiserver}}"}}},
		{title: "Time to first BOOKMARK and between BOOKMARKs", kind: "timeseries", unit: "s", w: 12, h: 8,
			description: "About 60 s each. When the interval nears the window, BOOKMARKs stop protecting reconnects.",
			targets: []target{
				{expr: `watchcache_first_bookmark_last_seconds{` + selAS + `}`, legend: "first BOOKMARK {{apiserver}}"},
				{expr: quantile("0.9", "watchcache_bookmark_interval_seconds", selAS, "apiserver, "), legend: "interval p90 {{apiserver}}"},
			}},
		{title: "Stale-RV distance", kind: "timeseries", unit: "short", w: 12, h: 8,
			description: "The cache's oldest servable RV minus the cycle's stale RV: live (negative while it is still served, counting down), and at each first 410.",
			targets: []target{
				{expr: `watchcache_stale_distance_live_resource_versions{` + selAS + `}`, legend: "live {{apiserver}}"},
				{expr: `watchcache_stale_distance_last_resource_versions{` + selAS + `}`, legend: "at last 410 {{apiserver}}"},
			}},
		{title: "Reconnect outcomes", kind: "timeseries", unit: "reqps", w: 12, h: 8,
			description: "Reconnect probes per second, from the stale RV and from the latest BOOKMARK RV: ok, expired (410) or error. Expired from bookmark means informers relist even with BOOKMARKs.",
			targets:     []target{{expr: `sum by (from, result) (rate(watchcache_reconnects_total{` + selAS + `}[$__rate_interval]))`, legend: "{{from}} {{result}}"}}},
		{title: "Expiry cycles by BOOKMARK reconnect", kind: "timeseries", unit: "short", w: 12, h: 8,
			description: "Completed cycles per hour, by whether a reconnect from the latest BOOKMARK RV was accepted when the stale RV was refused.",
			targets:     []target{{expr: `sum by (bookmark_result) (increase(watchcache_expiry_cycles_total{` + selAS + `}[1h]))`, legend: "{{bookmark_result}}"}}},
		{title: "Cache resets and probe freshness", kind: "timeseries", unit: "short", w: 12, h: 8,
			description: "Rebuilds of each apiserver's watch cache per hour (a restart, or a relist of its own: every older RV is refused at once, clients reconnecting to it relist), and the age of the last answered window probe (over 3 probe intervals the window gauges are NaN).",
			targets: []target{
				{expr: `sum by (apiserver) (increase(watchcache_cache_resets_total{` + selAS + `}[1h]))`, legend: "resets/h {{apiserver}}"},
				{expr: `time() - watchcache_last_probe_success_timestamp_seconds{` + selAS + `}`, legend: "probe age s {{apiserver}}"},
			}},
		{title: "Relists and watch restarts", kind: "timeseries", unit: "short", w: 12, h: 8,
			description: "What an informer would do: relist after a 410, reopen a watch after it ends.",
			targets: []target{
				{expr: `sum by (watcher) (increase(watchcache_relists_total{` + selAS + `}[$__rate_interval]))`, legend: "relists {{watcher}}"},
				{expr: `sum by (watcher, reason) (increase(watchcache_watch_restarts_total{` + selAS + `}[$__rate_interval]))`, legend: "restarts {{watcher}} {{reason}}"},
			}},
		{title: "Load: target and achieved", kind: "timeseries", unit: "wps", w: 12, h: 8,
			description: "The write rate the schedule asks for, and what the apiserver accepted.",
			targets: []target{
				{expr: `watchcache_load_target_writes_per_second{` + sel + `}`, legend: "target"},
				{expr: `sum by (result) (rate(watchcache_load_writes_total{` + sel + `}[$__rate_interval]))`, legend: "{{result}}"},
			}},
		{title: "Load: patch latency", kind: "timeseries", unit: "s", w: 12, h: 8,
			description: "Latency of the noise patches.",
			targets: []target{
				{expr: quantile("0.5", "watchcache_load_write_duration_seconds", sel, ""), legend: "p50"},
				{expr: quantile("0.99", "watchcache_load_write_duration_seconds", sel, ""), legend: "p99"},
			}},
		{title: "API errors", kind: "timeseries", unit: "reqps", w: 12, h: 8,
			description: "Failed requests of the measurement by operation and reason (Forbidden: RBAC; NotFound: a deleted object; TooManyRequests: APF), and failed or throttled load writes.",
			targets: []target{
				{expr: `sum by (operation, reason) (rate(watchcache_exporter_api_errors_total{` + selAS + `}[$__rate_interval]))`, legend: "{{operation}} {{reason}}"},
				{expr: `sum by (result) (rate(watchcache_load_writes_total{` + sel + `,result!="ok"}[$__rate_interval]))`, legend: "load {{result}}"},
			}},
		{title: "Every resource's window (--resources)", row: true},
		{title: "Windows of every resource, shortest first", kind: "table", w: 12, h: 12,
			description: "Per resource: the shortest window over the apiservers (an informer of it that stays disconnected longer relists), whether that is only a lower bound (1: the exporter's RV clock does not reach back to the cache's oldest event; the window is at least this), the objects a relist fetches, and the apiserver's watch cache capacity in events where Prometheus scrapes the apiservers.",
			targets: []target{
				{expr: `min by (group, resource) (watchcache_window_seconds{` + selAS + `})`, table: true},
				{expr: `max by (group, resource) (watchcache_window_lower_bound{` + selAS + `})`, table: true},
				{expr: `max by (group, resource) (watchcache_resource_objects{` + sel + `})`, table: true},
				{expr: `max by (group, resource) (watch_cache_capacity{job=~"$apiserver_job"})`, table: true},
			},
			transform: []dashboard.DataTransformerConfig{
				{Id: "merge", Options: obj{}},
				{Id: "organize", Options: obj{"excludeByName": obj{"Time": true},
					"renameByName": obj{"Value #A": "window", "Value #B": "lower bound", "Value #C": "objects", "Value #D": "capacity (events)"}}},
				{Id: "sortBy", Options: obj{"sort": []obj{{"field": "window", "desc": false}}}},
			}},
		{title: "Window of $resource against its write rate", kind: "timeseries", unit: "s", rightUnit: "wps", w: 12, h: 12,
			description: "The chosen resource's window per apiserver, against its write rate on the right: the events its watch cache received per second (where Prometheus scrapes the apiservers), and how fast the exporter saw the cache's oldest RV advance (RVs count every write in the cluster, so this is the cluster's write rate, one window late). The window is capacity / rate: it halves when the rate doubles, until the cache doubles its capacity.",
			targets: []target{
				{expr: `watchcache_window_seconds{` + selRes + `}`, legend: "window {{apiserver}} {{resource}}"},
				{expr: `sum by (resource) (rate(apiserver_watch_cache_events_received_total{job=~"$apiserver_job",resource=~"$resource"}[$__rate_interval]))`, legend: "rate: events/s {{resource}} (apiserver)"},
				{expr: `rate(watchcache_oldest_resource_version{` + selRes + `}[$__rate_interval])`, legend: "rate: oldest RV advance/s {{apiserver}} {{resource}}"},
			}},
		{title: "Both horizons: the watch window and the LIST horizon (etcd's compaction)", row: true},
		{title: "Watch window and LIST horizon of $resource", kind: "timeseries", unit: "s", w: 12, h: 9,
			description: "Two horizons per resource. The watch window (the shortest over the apiservers): how long a watch may stay disconnected before its resumption is refused. The LIST horizon: how old a resourceVersion may be for a LIST at exactly it, a paginated LIST's continue token, or a watch of a resource whose cache is off; it is etcd's compaction, one per etcd, a sawtooth between one and two compaction intervals that grows without bound when compaction stops. Beside them, the time a full paginated LIST of the largest resource took.",
			targets: []target{
				{expr: `min by (group, resource) (watchcache_window_seconds{` + selRes + `})`, legend: "watch window {{resource}}"},
				{expr: `max by (group, resource) (watchcache_compaction_window_seconds{` + sel + `,resource=~"$resource"})`, legend: "LIST horizon {{resource}}"},
				{expr: `max by (group, resource) (watchcache_paginated_list_seconds{` + sel + `})`, legend: "paginated LIST of {{resource}}"},
			}},
		{title: "etcd compactions", kind: "timeseries", unit: "s", w: 12, h: 9,
			description: "The interval the cluster really compacts at (between the last two compactions the exporter saw; the apiserver's --etcd-compaction-interval, 5m by default) and the time since the last one, per resource's etcd. WatchCacheEtcdCompactionStopped fires when that time passes 3 intervals.",
			targets: []target{
				{expr: `max by (group, resource) (watchcache_compaction_interval_seconds{` + sel + `,resource=~"$resource"})`, legend: "interval {{resource}}"},
				{expr: `time() - max by (group, resource) (watchcache_last_compaction_timestamp_seconds{` + sel + `,resource=~"$resource"})`, legend: "since the last {{resource}}"},
			}},
		{title: "The fleet: what holds on every apiserver", row: true},
		{title: "Fleet window against each apiserver's", kind: "timeseries", unit: "s", w: 16, h: 9,
			description: "The fleet window is what a client that may reconnect to any apiserver can rely on: an RV is safe only while every apiserver still serves it, so it is the shortest apiserver's window. During a rollout each restarted apiserver starts again near zero and grows back over one window; the fleet window follows the youngest cache, and recovers one window after the last restart.",
			targets: []target{
				{expr: `watchcache_fleet_window_seconds{` + sel + `,resource=~"$resource"}`, legend: "fleet {{resource}}"},
				{expr: `watchcache_window_seconds{` + selRes + `}`, legend: "{{apiserver}} {{resource}}"},
			}},
		{title: "Apiservers in the fleet", kind: "timeseries", unit: "short", w: 8, h: 9,
			description: "Apiservers measured; of those, listed in the kubernetes EndpointSlices (one that left is measured for --apiservers.grace-period, so that its restart shows as a cache reset); and those whose window of the resource is known and so in the fleet window.",
			targets: []target{
				{expr: `count(watchcache_apiserver_listed{` + sel + `})`, legend: "measured"},
				{expr: `sum(watchcache_apiserver_listed{` + sel + `})`, legend: "listed"},
				{expr: `max by (resource) (watchcache_fleet_window_apiservers{` + sel + `,resource=~"$resource"})`, legend: "in the fleet window {{resource}}"},
			}},
		{title: "Apiserver $apiserver", row: true, repeat: "apiserver"},
		{title: "Window of $apiserver against the fleet's", kind: "timeseries", unit: "s", w: 12, h: 8,
			description: "This apiserver's ConfigMap window, and the fleet's. Where they meet, this apiserver is the one that limits clients that may reconnect anywhere.",
			targets: []target{
				{expr: `watchcache_window_seconds{` + selAS + cm + `}`, legend: "{{apiserver}}"},
				{expr: `watchcache_fleet_window_seconds{` + sel + cm + `}`, legend: "fleet"},
			}},
		{title: "Rebuilds and presence of $apiserver", kind: "timeseries", unit: "short", w: 12, h: 8,
			description: "Rebuilds of this apiserver's watch cache (each one refuses every older RV: its clients relist), and whether the kubernetes EndpointSlices list it (0 while it restarts).",
			targets: []target{
				{expr: `increase(watchcache_cache_resets_total{` + selAS + `}[$__rate_interval])`, legend: "cache resets {{apiserver}}"},
				{expr: `watchcache_apiserver_listed{` + selAS + `}`, legend: "listed {{apiserver}}"},
			}},
		{title: "Relists against windows (apiserver job $apiserver_job)", row: true, repeat: "apiserver_job"},
		{title: "LIST rate against each resource's window", kind: "timeseries", unit: "s", rightUnit: "reqps", w: 24, h: 10,
			description: "Relist storms next to the windows that cause them: each resource's LIST requests per second from apiserver_request_total (the exporter's own object counts add one per resource and --resources.interval), and its shortest window. A LIST rate that jumps while a window is short is informers relisting after 410 Gone. Shown where Prometheus scrapes the apiservers (the apiserver job variable).",
			targets: []target{
				{expr: `min by (group, resource) (watchcache_window_seconds{` + selRes + `})`, legend: "window {{resource}}.{{group}}"},
				{expr: `sum by (group, resource) (rate(apiserver_request_total{job=~"$apiserver_job",verb="LIST",resource=~"$resource"}[$__rate_interval]))`, legend: "rate: LIST/s {{resource}}.{{group}}"},
			}},
	}
}

// panelBuilder is what every panel kind's builder offers.
type panelBuilder[B any] interface {
	*B
	cog.Builder[dashboard.Panel]
	Id(uint32) *B
	Title(string) *B
	Description(string) *B
	Datasource(common.DataSourceRef) *B
	Span(uint32) *B
	Height(uint32) *B
	Unit(string) *B
	WithTarget(cog.Builder[variants.Dataquery]) *B
	WithTransformation(dashboard.DataTransformerConfig) *B
}

// build sets what every panel has: title, size, unit, queries and
// transformations.
func build[B any, P panelBuilder[B]](b P, id int, p panel, ds common.DataSourceRef) P {
	// Each setter returns *B, not P: no chaining here.
	b.Id(uint32(id))
	b.Title(p.title)
	b.Description(p.description)
	b.Datasource(ds)
	b.Span(uint32(p.w))
	b.Height(uint32(p.h))
	b.Unit(p.unit)
	for j, t := range p.targets {
		q := prometheus.NewDataqueryBuilder().Datasource(ds).Expr(t.expr).LegendFormat(t.legend).
			RefId(string(rune('A' + j))).Range()
		switch {
		case t.heatmap:
			q.Format(prometheus.PromQueryFormatHeatmap)
		case t.table:
			q.Format(prometheus.PromQueryFormatTable).Instant()
		}
		b.WithTarget(q)
	}
	for _, tr := range p.transform {
		b.WithTransformation(tr)
	}
	return b
}

// rightAxis puts the series whose legend starts with "rate: " on a right
// axis with the unit given.
func rightAxis(unit string) []dashboard.DynamicConfigValue {
	return []dashboard.DynamicConfigValue{{Id: "custom.axisPlacement", Value: "right"}, {Id: "unit", Value: unit}}
}

const rateSeries = "^rate: .*"

// legend and tooltip set what the SDK's zero values leave off or empty:
// a legend shown, a tooltip mode.
func legend() *common.VizLegendOptionsBuilder {
	return common.NewVizLegendOptionsBuilder().ShowLegend(true).
		DisplayMode(common.LegendDisplayModeList).Placement(common.LegendPlacementBottom)
}

func tooltip(mode common.TooltipDisplayMode) *common.VizTooltipOptionsBuilder {
	return common.NewVizTooltipOptionsBuilder().Mode(mode).Sort(common.SortOrderNone)
}

// Dashboard is the Grafana dashboard.
func Dashboard() (dashboard.Dashboard, error) {
	ds := common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}
	d := dashboard.NewDashboardBuilder("Kubernetes watch cache history").
		Uid("watchcache-exporter").
		Description("How long the kube-apiserver's watch cache keeps its history, measured by watchcache-exporter.").
		Tags([]string{"kubernetes", "apiserver", "watchcache-exporter"}).
		Editable().
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Time("now-3h", "now").
		Refresh("30s")
	for i, p := range panels() {
		id := i + 1
		if p.row {
			r := dashboard.NewRowBuilder(p.title).Id(uint32(id)).Collapsed(false)
			if p.repeat != "" {
				r.Repeat(p.repeat)
			}
			d.WithRow(r)
			continue
		}
		var b cog.Builder[dashboard.Panel]
		switch p.kind {
		case "timeseries":
			ts := build(timeseries.NewPanelBuilder(), id, p, ds).Legend(legend()).Tooltip(tooltip(common.TooltipDisplayModeMulti))
			if p.rightUnit != "" {
				ts.OverrideByRegexp(rateSeries, rightAxis(p.rightUnit))
			}
			b = ts
		case "xychart":
			b = build(xychart.NewPanelBuilder(), id, p, ds).Legend(legend()).Tooltip(tooltip(common.TooltipDisplayModeSingle)).
				Mapping(xychart.SeriesMappingAuto).
				Series([]cog.Builder[xychart.XYSeriesConfig]{xychart.NewXYSeriesConfigBuilder().
					X(xychart.NewXychartXYSeriesConfigXBuilder().Matcher(xychart.NewMatcherConfigBuilder().Id("byName").Options(p.xy[0]))).
					Y(xychart.NewXychartXYSeriesConfigYBuilder().Matcher(xychart.NewMatcherConfigBuilder().Id("byName").Options(p.xy[1])))})
		case "heatmap":
			b = build(heatmap.NewPanelBuilder(), id, p, ds).Tooltip(heatmap.NewHeatmapTooltipBuilder().Mode(common.TooltipDisplayModeSingle))
		case "stat":
			b = build(stat.NewPanelBuilder(), id, p, ds).Orientation(common.VizOrientationAuto).
				ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}))
		case "table":
			b = build(table.NewPanelBuilder(), id, p, ds).ShowHeader(true)
		default:
			panic("monitoring: no builder for panel kind " + p.kind)
		}
		d.WithPanel(b)
	}
	variable := func(name, label, query string, all bool) *dashboard.QueryVariableBuilder {
		v := dashboard.NewQueryVariableBuilder(name).Label(label).Datasource(ds).
			Query(dashboard.StringOrMap{Map: obj{"query": query, "refId": name}}).Definition(query).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).Sort(dashboard.VariableSortAlphabeticalAsc).
			IncludeAll(all).Multi(all)
		if all {
			v.AllValue(".+")
		}
		return v
	}
	// The job under which Prometheus scrapes the apiservers (kube-prometheus-
	// stack: apiserver); without one, the row that needs it has no repeat
	// and is not shown.
	return d.
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus")).
		WithVariable(variable("job", "Job", `label_values(watchcache_exporter_build_info, job)`, true)).
		WithVariable(variable("instance", "Instance", `label_values(watchcache_exporter_build_info{job=~"$job"}, instance)`, true)).
		WithVariable(variable("apiserver", "Apiserver", `label_values(watchcache_window_seconds{job=~"$job",instance=~"$instance"}, apiserver)`, true)).
		WithVariable(variable("resource", "Resource", `label_values(watchcache_window_seconds{job=~"$job",instance=~"$instance"}, resource)`, true)).
		WithVariable(variable("apiserver_job", "Apiserver job", `label_values(apiserver_request_total, job)`, false).
			Description("The Prometheus job that scrapes the kube-apiservers' /metrics, for the capacity column and the LIST-rate row; none hides them.")).
		Build()
}

// DashboardQueries lists every PromQL expression of the dashboard: panel
// targets and variable queries' selectors.
func DashboardQueries() []string {
	var qs []string
	for _, p := range panels() {
		for _, t := range p.targets { // rows have none
			qs = append(qs, t.expr)
		}
	}
	return qs
}
