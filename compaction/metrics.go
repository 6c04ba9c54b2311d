package compaction

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/watchcache/watchcache-exporter/internal/promopts"
	"github.com/watchcache/watchcache-exporter/rvclock"
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(promopts.Namespace, "", name), help, labels, nil)
}

const (
	helpCompacted   = "The revision etcd last compacted to (etcd_debugging_mvcc_compact_revision), as the apiserver answers: the oldest resourceVersion a LIST at an exact resourceVersion still gets; 0 while etcd has never compacted. The same for every resource of one etcd."
	helpCompactions = "Compactions of the resource's etcd seen since the exporter started leading (its compacted revision moving up between two checks)."
	helpErrors      = "Failed LISTs of the compaction measurement (the probes and the timed paginated LIST), by Kubernetes status reason; Expired for a paginated LIST whose continue token etcd compacted away."
)

var (
	labels         = []string{"group", "resource"}
	windowDesc     = desc("compaction_window_seconds", "The LIST horizon: how old a resourceVersion may be and still be listed at exactly (resourceVersionMatch=Exact), continued from (a paginated LIST's continue token), or, with the watch cache off, watched from: now minus the time its etcd's compacted revision was written. Only a lower bound where watchcache_compaction_window_lower_bound is 1. NaN while unknown, and after 3 failed --compaction.interval.", labels...)
	lowerDesc      = desc("compaction_window_lower_bound", "1 when watchcache_compaction_window_seconds is only a lower bound: the compacted revision is older than anything the exporter's RV clock remembers (a young exporter, or compaction that has stopped).", labels...)
	compactedDesc  = desc("compacted_resource_version", helpCompacted, labels...)
	countDesc      = desc("compactions_total", helpCompactions, labels...)
	lastDesc       = desc("last_compaction_timestamp_seconds", "When the exporter saw the last compaction of the resource's etcd, in Unix seconds: within --compaction.interval after it. NaN until one is seen.", labels...)
	intervalDesc   = desc("compaction_interval_seconds", "Time between the last two compactions of the resource's etcd seen: the interval the cluster really compacts at (the apiserver's --etcd-compaction-interval, 5m by default). NaN until two are seen.", labels...)
	listDesc       = desc("paginated_list_seconds", "Time the last full paginated LIST of the largest measured resource took (limit=500 pages, metadata only, one page at a time; every --compaction.list-interval). A LIST horizon shorter than this makes such LISTs fail with 410 Gone at their continue token.", labels...)
	pagesDesc      = desc("paginated_list_pages", "Pages of the last full paginated LIST of watchcache_paginated_list_seconds.", labels...)
	perResourceAll = []*prometheus.Desc{windowDesc, lowerDesc, compactedDesc, countDesc, lastDesc, intervalDesc}
)

// collector gives each measured resource the horizon of its etcd, made at
// each scrape from what the checks found: the horizon grows between them.
type collector struct{ h *Horizon }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range perResourceAll {
		ch <- d
	}
	ch <- listDesc
	ch <- pagesDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	h := c.h
	now := time.Now()
	type row struct {
		group, resource string
		clk             *rvclock.Clock
		placed          bool
	}
	rows := []row{{"", "configmaps", h.cfg.History.Clock, true}}
	for _, r := range h.resources() {
		if r.Group == "" && r.Resource == "configmaps" {
			continue
		}
		clk, placed := h.cfg.History.ClockOf(r.Name())
		rows = append(rows, row{r.Group, r.Resource, clk, placed})
	}
	stale := time.Duration(h.cfg.StaleAfter) * h.cfg.Interval
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.running {
		return // a standby, or not started: it knows no horizon
	}
	for _, r := range rows {
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, r.group, r.resource)
		}
		e, known := h.etcds[r.clk]
		if !r.placed || !known {
			for _, d := range []*prometheus.Desc{windowDesc, lowerDesc, compactedDesc, lastDesc, intervalDesc} {
				gauge(d, math.NaN())
			}
			continue
		}
		window, lower, compacted := math.NaN(), math.NaN(), math.NaN()
		if e.oldest != 0 && now.Sub(e.answered) < stale {
			compacted = float64(e.oldest)
			if e.oldest == 1 { // RV 1 served: never compacted
				compacted = 0
			}
			if s, lowerBound, ok := r.clk.Age(e.oldest, now); ok {
				window, lower = s, 0
				if lowerBound {
					lower = 1
				}
			}
		}
		gauge(windowDesc, window)
		gauge(lowerDesc, lower)
		gauge(compactedDesc, compacted)
		ch <- prometheus.MustNewConstMetric(countDesc, prometheus.CounterValue, float64(e.compactions), r.group, r.resource)
		gauge(lastDesc, unix(e.last))
		interval := math.NaN()
		if !e.previous.IsZero() {
			interval = e.last.Sub(e.previous).Seconds()
		}
		gauge(intervalDesc, interval)
	}
	if l := h.list; l.done {
		ch <- prometheus.MustNewConstMetric(listDesc, prometheus.GaugeValue, l.seconds, l.r.Group, l.r.Resource)
		ch <- prometheus.MustNewConstMetric(pagesDesc, prometheus.GaugeValue, float64(l.pages), l.r.Group, l.r.Resource)
	}
}

func unix(t time.Time) float64 {
	if t.IsZero() {
		return math.NaN()
	}
	return float64(t.UnixNano()) / 1e9
}
