// Package monitoring is the source of the alert and recording rules and of
// the Grafana dashboard: `go run ./monitoring/gen` writes them out, and the
// tests check that what is committed is what this source generates.
package monitoring

import (
	"strconv"
	"time"

	"github.com/prometheus/common/model"
)

// RuleFile is a Prometheus rule file.
type RuleFile struct {
	Groups []RuleGroup `json:"groups"`
}

// RuleGroup is a group of rules.
type RuleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []Rule `json:"rules"`
}

// Rule is an alerting or recording rule.
type Rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// RunbookBase is where each alert's runbook lives: a section of docs/runbooks.md.
const RunbookBase = "https://github.com/watchcache/watchcache-exporter/blob/main/docs/runbooks.md#"

func alert(name, expr string, forDur time.Duration, severity, summary, description string) Rule {
	r := Rule{
		Alert: name,
		Expr:  expr,
		Labels: map[string]string{
			"severity": severity,
		},
		Annotations: map[string]string{
			"summary":     summary,
			"description": description,
			"runbook_url": RunbookBase + anchor(name),
		},
	}
	if forDur > 0 {
		r.For = model.Duration(forDur).String()
	}
	return r
}

// anchor is GitHub's anchor of a README heading that is the alert's name.
func anchor(name string) string {
	b := []byte(name)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// BookmarkPeriodSeconds is how often the apiserver sends BOOKMARKs, plus the
// time one takes to arrive: a window shorter than this lets an idle
// informer's newest RV expire between two BOOKMARKs.
const BookmarkPeriodSeconds = 65

// resourceWindowShort: the windows of --resources (configmaps are
// WatchCacheWindowShorterThanBookmarkPeriod's) that are more than lower
// bounds, under the resource's own threshold where a rule gives one, else
// under the default.
var resourceWindowShort = func() string {
	w := `min by (job, apiserver, group, resource) (watchcache_window_seconds{resource!="configmaps"} unless on (job, instance, apiserver, group, resource) (watchcache_window_lower_bound == 1))`
	return `(` + w + ` < on (group, resource) group_left () max by (group, resource) (watchcache:resource_window_threshold_seconds))` +
		` or ((` + w + ` unless on (group, resource) watchcache:resource_window_threshold_seconds) < on () group_left () max(watchcache:resource_window_threshold_seconds:default))`
}()

// Rules are the alert and recording rules.
func Rules() RuleFile {
	return RuleFile{Groups: []RuleGroup{
		{
			Name: "watchcache-exporter.recording",
			Rules: []Rule{
				{Record: "apiserver:watchcache_window_seconds:min10m", Expr: `min by (job, apiserver) (min_over_time(watchcache_window_seconds{resource="configmaps"}[10m]))`},
				// WatchCacheResourceWindowShort's threshold: this default, or a
				// rule of the same name with group and resource labels.
				{Record: "watchcache:resource_window_threshold_seconds:default", Expr: "vector(" + strconv.Itoa(BookmarkPeriodSeconds) + ")"},
				{Record: "job:watchcache_load_writes:rate5m", Expr: `sum by (job, result) (rate(watchcache_load_writes_total[5m]))`},
				{Record: "apiserver:watchcache_expiry_seconds:p50_1h", Expr: `histogram_quantile(0.5, sum by (job, apiserver, le) (rate(watchcache_expiry_seconds_bucket[1h]))) or histogram_quantile(0.5, sum by (job, apiserver) (rate(watchcache_expiry_seconds[1h])))`},
			},
		},
		{
			Name: "watchcache-exporter.alerts",
			Rules: []Rule{
				alert("WatchCacheWindowShorterThanBookmarkPeriod",
					`min by (job, apiserver) (watchcache_window_seconds{resource="configmaps"}) < 65`, 10*time.Minute, "warning",
					"The watch cache of {{ $labels.apiserver }} keeps less history than the time between two BOOKMARKs.",
					"The window is {{ $value | humanizeDuration }}. An informer that reconnects after missing one BOOKMARK (about 60 s) now gets 410 Gone and relists everything."),
				alert("WatchCacheResourceWindowShort",
					resourceWindowShort, 15*time.Minute, "warning",
					"The watch cache of {{ $labels.resource }}{{ if $labels.group }}.{{ $labels.group }}{{ end }} on {{ $labels.apiserver }} keeps only {{ $value | humanizeDuration }} of history.",
					"Informers of this resource that stay disconnected longer (an apiserver rollout, a network blip, a slow consumer) get 410 Gone and relist every object (see watchcache_resource_objects). The threshold is watchcache:resource_window_threshold_seconds for this resource, else its :default."),
				// Compaction: one interval normally, up to two while the
				// apiservers hand the compaction over (their compare-and-swap
				// on compact_rev_key); three without one means it stopped.
				alert("WatchCacheEtcdCompactionStopped",
					`time() - max by (job, group, resource) (watchcache_last_compaction_timestamp_seconds) > 3 * max by (job, group, resource) (watchcache_compaction_interval_seconds)`, time.Minute, "warning",
					"etcd (of {{ $labels.resource }}{{ if $labels.group }}.{{ $labels.group }}{{ end }}) has not compacted for {{ $value | humanizeDuration }}, over 3 times its interval.",
					"Every revision is kept since: etcd's database grows until it reaches its quota (--quota-backend-bytes), and then etcd refuses every write (alarm NOSPACE) and the cluster stops. The LIST horizon grows meanwhile (watchcache_compaction_window_seconds)."),
				alert("WatchCacheListHorizonShorterThanList",
					`max by (job, group, resource) (watchcache_paginated_list_seconds) > on (job, group, resource) min by (job, group, resource) (min_over_time(watchcache_compaction_window_seconds[1h]) unless on (job, instance, group, resource) (watchcache_compaction_window_lower_bound == 1))`, 5*time.Minute, "warning",
					"A full paginated LIST of {{ $labels.resource }}{{ if $labels.group }}.{{ $labels.group }}{{ end }} takes {{ $value | humanizeDuration }}, longer than its shortest LIST horizon of the last hour.",
					"A client that lists it 500 at a time (an informer's first LIST, kubectl get --chunk-size) can have its continue token compacted away mid-list: 410 Gone, and it starts again. Compact less often (--etcd-compaction-interval), or list fewer objects."),
				alert("WatchCacheReplicaRebuilt",
					`sum by (job, apiserver) (increase(watchcache_cache_resets_total[10m])) > 0`, 0, "info",
					"The watch cache of {{ $labels.apiserver }} was rebuilt: clients that reconnect to it relist.",
					"Its history starts again from a fresh list (a restart, or a relist of its own), so it refuses every older resourceVersion: each informer that reconnects to it, from any apiserver, relists everything. Expected once per apiserver in a rollout; otherwise look for restarts (OOM, probes) and etcd trouble. watchcache_fleet_window_seconds shows what clients that may land on any apiserver can rely on meanwhile."),
				alert("WatchCacheBookmarksStopped",
					`sum by (job, apiserver) (increase(watchcache_watch_events_total{watcher="bookmarks",type="BOOKMARK"}[5m])) == 0 and on (job, apiserver) min by (job, apiserver) (watchcache_watch_open{watcher="bookmarks"}) == 1`, 10*time.Minute, "warning",
					"No BOOKMARK from {{ $labels.apiserver }} for 15 minutes on an open watch.",
					"Bookmarks keep idle informers' resourceVersions fresh; without them, informers relist after every reconnect that outlasts the window."),
				// A rebuilt cache (an apiserver restart) refuses the BOOKMARK's
				// RV too: that is WatchCacheReplicaRebuilt's, not this one's.
				alert("WatchCacheBookmarkReconnectRefused",
					`sum by (job, apiserver) (increase(watchcache_reconnects_total{from="bookmark",result="expired"}[10m])) > 0 unless on (job, apiserver) sum by (job, apiserver) (increase(watchcache_cache_resets_total[15m])) > 0`, 5*time.Minute, "warning",
					"{{ $labels.apiserver }} refused a reconnect from the latest BOOKMARK's resourceVersion, with no rebuild of its cache.",
					"Even informers that follow BOOKMARKs will relist after a reconnect: the window is shorter than the bookmark period (at the 102400-event cap of the default history window, a write rate above about 1700/s: 102400 events / 60 s)."),
				alert("WatchCacheExporterLoadThrottled",
					`sum by (job) (rate(watchcache_load_writes_total{result="throttled"}[5m])) > 0`, 10*time.Minute, "info",
					"The apiserver throttles the exporter's load (429, API Priority and Fairness).",
					"The window is measured at a lower write rate than asked for; its flow control keeps the cluster's own requests first."),
				alert("WatchCacheExporterLoadFailing",
					`sum by (job) (rate(watchcache_load_writes_total{result="error"}[5m])) / sum by (job) (rate(watchcache_load_writes_total[5m])) > 0.05`, 10*time.Minute, "warning",
					"More than 5% of the exporter's load writes fail.",
					"See watchcache_exporter_api_errors_total and the exporter's log for the reason (Forbidden, NotFound, ...)."),
				// job is the Service's app.kubernetes.io/name (the
				// ServiceMonitor's jobLabel), whatever the release is called.
				alert("WatchCacheExporterDown",
					`up{job="watchcache-exporter"} == 0`, 5*time.Minute, "warning",
					"Prometheus cannot scrape watchcache-exporter.",
					"The watch cache history is not measured."),
				alert("WatchCacheExporterAbsent",
					`absent(up{job="watchcache-exporter"})`, 15*time.Minute, "warning",
					"Prometheus has no watchcache-exporter to scrape.",
					"No target of the exporter's job: the Deployment is gone or scaled to 0, or service discovery does not find its Service (ServiceMonitor selector, namespace, or a job name other than the Service's app.kubernetes.io/name label)."),
				alert("WatchCacheMeasurementStale",
					`time() - max by (job, apiserver) (watchcache_last_probe_success_timestamp_seconds) > 180`, 5*time.Minute, "warning",
					"No probe of {{ $labels.apiserver }} has succeeded for over 3 minutes.",
					"Its window and expiry series are stale (the window gauges are NaN). See watchcache_exporter_api_errors_total and the exporter's log: apiserver unreachable, RBAC, or flow control."),
				alert("WatchCacheExporterNotLeading",
					`max by (job) (watchcache_exporter_leader) == 0`, 5*time.Minute, "warning",
					"No watchcache-exporter holds its Lease: nothing is measured.",
					"Every exporter scraped is a standby. The holder may be unable to renew the Lease (apiserver unreachable, RBAC on leases), or a dead holder's Lease has not expired."),
				alert("WatchCacheExporterObjectsLost",
					`max by (job) (watchcache_exporter_objects_lost) > 0`, 5*time.Minute, "warning",
					"{{ $value }} ConfigMaps of the exporter lost their marks and are no longer written.",
					"Somebody removed the exporter's label or owner annotation, or took the names. The exporter leaves them alone until they are deleted or their marks are back."),
				alert("WatchCacheExporterWatchersNotOpen",
					`min by (job, apiserver, watcher) (watchcache_watch_open) == 0`, 5*time.Minute, "warning",
					"The exporter's {{ $labels.watcher }} watcher on {{ $labels.apiserver }} has been closed for 5 minutes.",
					"Its measurements of that apiserver are stale; see watchcache_exporter_api_errors_total and the exporter's log."),
			},
		},
	}}
}
