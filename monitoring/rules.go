// Package monitoring is the source of the alert and recording rules and of
// the Grafana dashboard: `go run ./monitoring/gen` writes them out, and the
// tests check that what is committed is what this source generates.
package monitoring

import (
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

// RunbookBase is where each alert's runbook lives: a section of the README.
const RunbookBase = "https://github.com/watchcache/watchcache-exporter/blob/main/README.md#"

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

// Rules are the alert and recording rules.
func Rules() RuleFile {
	return RuleFile{Groups: []RuleGroup{
		{
			Name: "watchcache-exporter.recording",
			Rules: []Rule{
				{Record: "apiserver:watchcache_window_seconds:min10m", Expr: `min by (job, apiserver) (min_over_time(watchcache_window_seconds[10m]))`},
				{Record: "job:watchcache_load_writes:rate5m", Expr: `sum by (job, result) (rate(watchcache_load_writes_total[5m]))`},
				{Record: "apiserver:watchcache_expiry_seconds:p50_1h", Expr: `histogram_quantile(0.5, sum by (job, apiserver, le) (rate(watchcache_expiry_seconds_bucket[1h]))) or histogram_quantile(0.5, sum by (job, apiserver) (rate(watchcache_expiry_seconds[1h])))`},
			},
		},
		{
			Name: "watchcache-exporter.alerts",
			Rules: []Rule{
				alert("WatchCacheWindowShorterThanBookmarkPeriod",
					`min by (job, apiserver) (watchcache_window_seconds) < 65`, 10*time.Minute, "warning",
					"The watch cache of {{ $labels.apiserver }} keeps less history than the time between two BOOKMARKs.",
					"The window is {{ $value | humanizeDuration }}. An informer that reconnects after missing one BOOKMARK (about 60 s) now gets 410 Gone and relists everything."),
				alert("WatchCacheBookmarksStopped",
					`sum by (job, apiserver) (increase(watchcache_watch_events_total{watcher="bookmarks",type="BOOKMARK"}[5m])) == 0 and on (job, apiserver) min by (job, apiserver) (watchcache_watch_open{watcher="bookmarks"}) == 1`, 10*time.Minute, "warning",
					"No BOOKMARK from {{ $labels.apiserver }} for 15 minutes on an open watch.",
					"Bookmarks keep idle informers' resourceVersions fresh; without them, informers relist after every reconnect that outlasts the window."),
				alert("WatchCacheBookmarkReconnectRefused",
					`sum by (job, apiserver) (increase(watchcache_reconnects_total{from="bookmark",result="expired"}[10m])) > 0`, 0, "critical",
					"{{ $labels.apiserver }} refused a reconnect from the latest BOOKMARK's resourceVersion.",
					"Even informers that follow BOOKMARKs will relist after a reconnect: the window is shorter than the bookmark period (write rate above ~1700/s?)."),
				alert("WatchCacheExporterLoadThrottled",
					`sum by (job) (rate(watchcache_load_writes_total{result="throttled"}[5m])) > 0`, 10*time.Minute, "info",
					"The apiserver throttles the exporter's load (429, API Priority and Fairness).",
					"The window is measured at a lower write rate than asked for; its flow control keeps the cluster's own requests first."),
				alert("WatchCacheExporterLoadFailing",
					`sum by (job) (rate(watchcache_load_writes_total{result="error"}[5m])) / sum by (job) (rate(watchcache_load_writes_total[5m])) > 0.05`, 10*time.Minute, "warning",
					"More than 5% of the exporter's load writes fail.",
					"See watchcache_api_errors_total and the exporter's log for the reason (Forbidden, NotFound, ...)."),
				alert("WatchCacheExporterDown",
					`up{job="watchcache-exporter"} == 0`, 5*time.Minute, "warning",
					"Prometheus cannot scrape watchcache-exporter.",
					"The watch cache history is not measured."),
				alert("WatchCacheMeasurementStale",
					`time() - max by (job, apiserver) (watchcache_last_probe_success_timestamp_seconds) > 180`, 5*time.Minute, "warning",
					"No probe of {{ $labels.apiserver }} has succeeded for over 3 minutes.",
					"Its window and expiry series are stale (the window gauges are NaN). See watchcache_api_errors_total and the exporter's log: apiserver unreachable, RBAC, or flow control."),
				alert("WatchCacheExporterNotLeading",
					`max by (job) (watchcache_exporter_leader) == 0`, 5*time.Minute, "warning",
					"No watchcache-exporter holds its Lease: nothing is measured.",
					"Every exporter scraped is a standby. The holder may be unable to renew the Lease (apiserver unreachable, RBAC on leases), or a dead holder's Lease has not expired."),
				alert("WatchCacheExporterObjectsLost",
					`max by (job) (watchcache_objects_lost) > 0`, 5*time.Minute, "warning",
					"{{ $value }} ConfigMaps of the exporter lost their marks and are no longer written.",
					"Somebody removed the exporter's label or owner annotation, or took the names. The exporter leaves them alone until they are deleted or their marks are back."),
				alert("WatchCacheExporterWatchersNotOpen",
					`min by (job, apiserver, watcher) (watchcache_watch_open) == 0`, 5*time.Minute, "warning",
					"The exporter's {{ $labels.watcher }} watcher on {{ $labels.apiserver }} has been closed for 5 minutes.",
					"Its measurements of that apiserver are stale; see watchcache_api_errors_total and the exporter's log."),
			},
		},
	}}
}
