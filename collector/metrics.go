package collector

import (
	"math"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/watchcache/watchcache-exporter/internal/promopts"
)

var nan = math.NaN()

var (
	// Bookmarks come about every 60 s.
	bookmarkBuckets = []float64{1, 5, 10, 20, 30, 40, 50, 55, 58, 59, 60, 61, 62, 65, 70, 80, 90, 120, 180, 300, 600}
	// The history window is 75–150 s at steady rates, up to ~300 s after a
	// rate drop, shorter only above ~1365 writes/s.
	expiryBuckets   = []float64{5, 10, 20, 30, 45, 60, 70, 75, 80, 85, 90, 100, 110, 120, 130, 140, 150, 160, 180, 240, 300, 450, 600}
	distanceBuckets = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000}
)

// The window series of every resource share their names and help: those of
// the ConfigMap measurement carry group="" and resource="configmaps", as the
// apiserver's own watch cache metrics name it.
const (
	HelpWindowSeconds          = "History window of the resource's watch cache: now minus the time at which its oldest resourceVersion was written. Only a lower bound where watchcache_window_lower_bound is 1. NaN while unknown, and after 3 failed probe intervals."
	HelpWindowResourceVersions = "History window in resourceVersions: the newest resourceVersion known minus the oldest servable one, both read when the probe's answer arrived."
	HelpOldestResourceVersion  = "The oldest resourceVersion the apiserver still serves a watch of the resource from: O of 'too old resource version: R (O)', or, with the watch cache off, the oldest revision etcd has not compacted."
	HelpWindowLowerBound       = "1 when watchcache_window_seconds is only a lower bound (the window is at least that long): the oldest resourceVersion is older than anything the exporter's RV clock remembers, as for a quiet resource or a young exporter."
)

// windowVecs are the window series of one apiserver, every resource's: the
// ConfigMap measurement's and ResourceWindows' share them. They also keep
// the known windows as values, for the fleet's window across apiservers.
type windowVecs struct {
	table *gaugeTable // columns: the window* constants

	mu    sync.Mutex
	known map[[2]string]Window // by group, resource
}

// The columns of windowVecs.table.
const (
	windowSecondsCol = iota
	windowRVsCol
	oldestCol
	lowerCol
)

// Window is one resource's window on one apiserver, as last measured.
type Window struct {
	Group, Resource string
	// Oldest is the oldest resourceVersion the apiserver serves a watch
	// from.
	Oldest uint64
	// Seconds since Oldest+1 was written; NaN when the RV clock cannot
	// tell. Only a lower bound where LowerBound is set.
	Seconds    float64
	LowerBound bool
}

// LowerBoundValue is the value of a window_lower_bound gauge: 1 for a lower
// bound, 0 for the window itself, NaN when the seconds are unknown.
func (w Window) LowerBoundValue() float64 {
	switch {
	case w.LowerBound:
		return 1
	case math.IsNaN(w.Seconds):
		return nan
	}
	return 0
}

func newWindowVecs(t tables) *windowVecs {
	w := &windowVecs{
		table: t.newGaugeTable(
			promopts.Gauge("window_seconds", HelpWindowSeconds),
			promopts.Gauge("window_resource_versions", HelpWindowResourceVersions),
			promopts.Gauge("oldest_resource_version", HelpOldestResourceVersion),
			promopts.Gauge("window_lower_bound", HelpWindowLowerBound)),
		known: map[[2]string]Window{},
	}
	return w
}

// set records a measured window; rvs is its size in resourceVersions (NaN
// when unknown).
func (w *windowVecs) set(win Window, rvs float64) {
	g, r := win.Group, win.Resource
	w.table.set(g, r, oldestCol, float64(win.Oldest))
	w.table.set(g, r, windowRVsCol, rvs)
	w.table.set(g, r, windowSecondsCol, win.Seconds)
	w.table.set(g, r, lowerCol, win.LowerBoundValue())
	w.mu.Lock()
	w.known[[2]string{g, r}] = win
	w.mu.Unlock()
}

// setUnknown turns a resource's window series to NaN.
func (w *windowVecs) setUnknown(group, resource string) {
	for col := range w.table.descs {
		w.table.set(group, resource, col, nan)
	}
	w.mu.Lock()
	delete(w.known, [2]string{group, resource})
	w.mu.Unlock()
}

// delete removes a resource's window series.
func (w *windowVecs) delete(group, resource string) {
	w.table.delete(group, resource)
	w.mu.Lock()
	delete(w.known, [2]string{group, resource})
	w.mu.Unlock()
}

// windows are the known windows, in no order.
func (w *windowVecs) windows() []Window {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Window, 0, len(w.known))
	for _, win := range w.known {
		out = append(out, win)
	}
	return out
}

// Metrics are one apiserver's series; see the README for what each tells an
// operator.
type Metrics struct {
	firstBookmark       prometheus.Histogram
	firstBookmarkLast   prometheus.Gauge
	bookmarkInterval    prometheus.Histogram
	pretimeoutBookmarks prometheus.Counter
	expiry              prometheus.Histogram
	expiryLast          prometheus.Gauge
	distance            prometheus.Histogram
	distanceLast        prometheus.Gauge
	distanceLive        prometheus.Gauge
	windows             *windowVecs
	newestRV            prometheus.Gauge
	estimatedCapacity   prometheus.Gauge
	lastProbeSuccess    prometheus.Gauge
	cacheResets         prometheus.Counter
	resetsUnknown       prometheus.Counter
	cyclesDiscarded     *prometheus.CounterVec
	pauses              *prometheus.CounterVec
	reconnects          *prometheus.CounterVec
	refusals            *prometheus.CounterVec
	cycles              *prometheus.CounterVec
	watchEvents         *prometheus.CounterVec
	watchOpen           *prometheus.GaugeVec
	watchRestarts       *prometheus.CounterVec
	relists             *prometheus.CounterVec
	apiErrors           *prometheus.CounterVec
	quietRecreations    prometheus.Counter
	quietTouches        prometheus.Counter

	registered []*recordingRegisterer // what to unregister
}

// newMetrics registers the series on reg, and the window table through t.
func newMetrics(reg *recordingRegisterer, t tables) *Metrics {
	f := promauto.With(reg)
	g := func(name, help string) prometheus.Gauge { return f.NewGauge(promopts.Gauge(name, help)) }
	c := func(name, help string) prometheus.Counter { return f.NewCounter(promopts.Counter(name, help)) }
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		return f.NewCounterVec(promopts.Counter(name, help), labels)
	}
	windows := newWindowVecs(t)
	m := &Metrics{
		registered: []*recordingRegisterer{reg, t.reg},
		firstBookmark: f.NewHistogram(promopts.Histogram("first_bookmark_seconds",
			"Time from opening the bookmark watch to its first BOOKMARK event.", bookmarkBuckets)),
		firstBookmarkLast: g("first_bookmark_last_seconds", "The last observation of watchcache_first_bookmark_seconds."),
		bookmarkInterval: f.NewHistogram(promopts.Histogram("bookmark_interval_seconds",
			"Time between consecutive periodic BOOKMARK events on one bookmark watch; the BOOKMARK sent just before a watch's timeoutSeconds is not a period and is left out.", bookmarkBuckets)),
		pretimeoutBookmarks: c("pretimeout_bookmarks_total", "BOOKMARKs the apiserver sent about 2 s before a watch's timeoutSeconds (left out of watchcache_bookmark_interval_seconds)."),
		expiry: f.NewHistogram(promopts.Histogram("expiry_seconds",
			"Time from obtaining a resourceVersion to the first 410 Gone when reconnecting from it (time to first 410). Cycles ended by a cache reset, or whose refusal came in a gap of the probes, are left out (watchcache_expiry_cycles_discarded_total).", expiryBuckets)),
		expiryLast: g("expiry_last_seconds", "The last observation of watchcache_expiry_seconds."),
		distance: f.NewHistogram(promopts.Histogram("stale_distance_resource_versions",
			"At each first 410: the watch cache's oldest servable resourceVersion minus the refused one.", distanceBuckets)),
		distanceLast:      g("stale_distance_last_resource_versions", "The last observation of watchcache_stale_distance_resource_versions."),
		distanceLive:      g("stale_distance_live_resource_versions", "The cache's oldest servable resourceVersion minus the current cycle's stale one; negative while the stale one is still served."),
		windows:           windows,
		newestRV:          g("newest_resource_version", "The newest resourceVersion the exporter had seen written when the window probe was answered."),
		estimatedCapacity: g("estimated_capacity_events", "The exporter's own ConfigMap writes newer than the cache's oldest resourceVersion: a lower bound of the watch cache's capacity, equal to it where the exporter is the only ConfigMap writer."),
		lastProbeSuccess:  g("last_probe_success_timestamp_seconds", "When the window probe last got an answer from this apiserver (Unix time)."),
		cacheResets:       c("cache_resets_total", "Times this apiserver's watch cache was rebuilt (its restart, or a relist of its own): its oldest resourceVersion jumped past every write known at the previous probe."),
		resetsUnknown:     c("cache_resets_unknown_total", "Times the oldest resourceVersion was found past every write known at the previous answered probe after a gap (an outage of this apiserver, a pause) long enough for the cache to have dropped them by itself: a reset in the gap cannot be told from the window's progress, and none is counted."),
		cyclesDiscarded:   cv("expiry_cycles_discarded_total", "Expiry cycles left out of watchcache_expiry_seconds, by why: cache_reset (the stale resourceVersion was refused because the cache was rebuilt), probe_gap (no probe was answered for 3 probe intervals or more before the refusal, so its time is not known).", "reason"),
		pauses:            cv("probe_pauses_total", "Pauses of the probes that an apiserver asked for with Retry-After; capped=\"true\" where it asked for more than 60 s, and the pause was 60 s.", "capped"),
		reconnects:        cv("reconnects_total", "Reconnect probes, by the kind of resourceVersion they started from and their result.", "from", "result"),
		refusals:          cv("refusals_total", "410 Gone answers seen by probes, by which store refused: the watch cache, or etcd compaction.", "source"),
		cycles:            cv("expiry_cycles_total", "Completed expiry cycles, by the result of the reconnect from the latest BOOKMARK at the moment the stale resourceVersion was refused.", "bookmark_result"),
		watchEvents:       cv("watch_events_total", "Events each long-lived watcher received, by type.", "watcher", "type"),
		watchOpen: f.NewGaugeVec(promopts.Gauge("watch_open",
			"1 while the long-lived watcher's watch is open."), []string{"watcher"}),
		watchRestarts:    cv("watch_restarts_total", "Times a long-lived watcher reopened its watch, by why it had ended.", "watcher", "reason"),
		relists:          cv("relists_total", "Times a long-lived watcher had to relist because its resourceVersion was refused with 410 Gone.", "watcher"),
		apiErrors:        cv("exporter_api_errors_total", "Failed apiserver requests of the measurement, by operation and Kubernetes status reason (Forbidden, NotFound, TooManyRequests, CacheInitializing for a watch cache that is (re)initialising, ...).", "operation", "reason"),
		quietRecreations: c("quiet_recreations_total", "Times the quiet ConfigMap was found deleted and created again."),
		quietTouches:     c("quiet_touches_total", "Patches of the quiet ConfigMap, one at the start of each expiry cycle."),
	}
	for _, w := range []string{WatcherPlain, WatcherBookmarks} {
		m.watchOpen.WithLabelValues(w)
		m.relists.WithLabelValues(w)
	}
	for _, r := range []string{OK.String(), Expired.String(), Error.String(), "none"} {
		m.cycles.WithLabelValues(r)
	}
	for _, r := range []string{"cache_reset", "probe_gap"} {
		m.cyclesDiscarded.WithLabelValues(r)
	}
	for _, capped := range []string{"false", "true"} {
		m.pauses.WithLabelValues(capped)
	}
	for _, from := range []string{FromStale, FromBookmark} {
		for _, r := range []Outcome{OK, Expired, Error} {
			m.reconnects.WithLabelValues(from, r.String())
		}
	}
	windows.setUnknown("", "configmaps")
	for _, x := range []prometheus.Gauge{m.estimatedCapacity, m.newestRV,
		m.distanceLive, m.distanceLast, m.expiryLast, m.firstBookmarkLast} {
		x.Set(nan)
	}
	return m
}

// unregister removes every series of these metrics, for an apiserver that
// is gone.
func (m *Metrics) unregister() {
	for _, r := range m.registered {
		for _, c := range r.collectors {
			r.Unregister(c)
		}
	}
}

// recordingRegisterer remembers what it registered, for unregister.
type recordingRegisterer struct {
	prometheus.Registerer
	collectors []prometheus.Collector
}

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	if err := r.Registerer.Register(c); err != nil {
		return err
	}
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}
