package collector

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

const namespace = "watchcache"

// Native histograms next to the classic buckets, so that Prometheus servers
// with and without native histograms both resolve the interesting range.
func histogram(name, help string, buckets []float64) prometheus.HistogramOpts {
	return prometheus.HistogramOpts{
		Namespace:                       namespace,
		Name:                            name,
		Help:                            help,
		Buckets:                         buckets,
		NativeHistogramBucketFactor:     1.1,
		NativeHistogramMaxBucketNumber:  160,
		NativeHistogramMinResetDuration: time.Hour,
	}
}

var (
	// Bookmarks come about every 60 s.
	bookmarkBuckets = []float64{1, 5, 10, 20, 30, 40, 50, 55, 58, 59, 60, 61, 62, 65, 70, 80, 90, 120, 180, 300, 600}
	// The history window is 75–150 s at steady rates, up to ~300 s after a
	// rate drop, shorter only above ~1365 writes/s.
	expiryBuckets   = []float64{5, 10, 20, 30, 45, 60, 70, 75, 80, 85, 90, 100, 110, 120, 130, 140, 150, 160, 180, 240, 300, 450, 600}
	distanceBuckets = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000}
)

// Metrics are the collector's series; see the README for what each tells an
// operator.
type Metrics struct {
	firstBookmark     prometheus.Histogram
	firstBookmarkLast prometheus.Gauge
	bookmarkInterval  prometheus.Histogram
	expiry            prometheus.Histogram
	expiryLast        prometheus.Gauge
	distance          prometheus.Histogram
	distanceLast      prometheus.Gauge
	distanceLive      prometheus.Gauge
	windowSeconds     prometheus.Gauge
	windowRVs         prometheus.Gauge
	oldestRV          prometheus.Gauge
	newestRV          prometheus.Gauge
	reconnects        *prometheus.CounterVec
	refusals          *prometheus.CounterVec
	cycles            *prometheus.CounterVec
	watchEvents       *prometheus.CounterVec
	watchOpen         *prometheus.GaugeVec
	watchRestarts     *prometheus.CounterVec
	relists           *prometheus.CounterVec
	apiErrors         *prometheus.CounterVec
	quietRecreations  prometheus.Counter
	quietTouches      prometheus.Counter
	estimatedCapacity prometheus.Gauge

	registered *recordingRegisterer
}

// NewMetrics registers the collector's series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	rec := &recordingRegisterer{Registerer: reg}
	f := promauto.With(rec)
	m := &Metrics{
		registered: rec,
		firstBookmark: f.NewHistogram(histogram("first_bookmark_seconds",
			"Time from opening the bookmark watch to its first BOOKMARK event.", bookmarkBuckets)),
		firstBookmarkLast: f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "first_bookmark_seconds_last",
			Help: "The last observation of watchcache_first_bookmark_seconds."}),
		bookmarkInterval: f.NewHistogram(histogram("bookmark_interval_seconds",
			"Time between consecutive BOOKMARK events on one bookmark watch.", bookmarkBuckets)),
		expiry: f.NewHistogram(histogram("expiry_seconds",
			"Time from obtaining a resourceVersion to the first 410 Gone when reconnecting from it (time to first 410).", expiryBuckets)),
		expiryLast: f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "expiry_seconds_last",
			Help: "The last observation of watchcache_expiry_seconds."}),
		distance: f.NewHistogram(histogram("stale_rv_distance",
			"At each first 410: the watch cache's oldest servable resourceVersion minus the refused one.", distanceBuckets)),
		distanceLast: f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "stale_rv_distance_last",
			Help: "The last observation of watchcache_stale_rv_distance."}),
		distanceLive: f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "stale_rv_distance_live",
			Help: "The cache's oldest servable resourceVersion minus the current cycle's stale one; negative while the stale one is still served."}),
		windowSeconds: f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "window_seconds",
			Help: "History window: now minus the time at which the cache's oldest resourceVersion was written. NaN until the exporter has seen that resourceVersion written."}),
		windowRVs: f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "window_resource_versions",
			Help: "History window in resourceVersions: the newest known minus the cache's oldest servable one."}),
		oldestRV: f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "oldest_resource_version",
			Help: "The oldest resourceVersion the watch cache still serves a watch from (O of 'too old resource version: R (O)')."}),
		newestRV: f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "newest_resource_version",
			Help: "The newest resourceVersion the exporter has seen written."}),
		reconnects: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "reconnects_total",
			Help: "Reconnect probes, by the kind of resourceVersion they started from and their result."}, []string{"from", "result"}),
		refusals: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "refusals_total",
			Help: "410 Gone answers seen by probes, by which store refused: the watch cache, or etcd compaction."}, []string{"source"}),
		cycles: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "expiry_cycles_total",
			Help: "Completed expiry cycles, by the result of the reconnect from the latest BOOKMARK at the moment the stale resourceVersion was refused."}, []string{"bookmark_result"}),
		watchEvents: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "watch_events_total",
			Help: "Events each long-lived watcher received, by type."}, []string{"watcher", "type"}),
		watchOpen: f.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "watch_open",
			Help: "1 while the long-lived watcher's watch is open."}, []string{"watcher"}),
		watchRestarts: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "watch_restarts_total",
			Help: "Times a long-lived watcher reopened its watch, by why it had ended."}, []string{"watcher", "reason"}),
		relists: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "relists_total",
			Help: "Times a long-lived watcher had to relist because its resourceVersion was refused with 410 Gone."}, []string{"watcher"}),
		apiErrors: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "api_errors_total",
			Help: "Failed apiserver requests of the measurement, by operation and Kubernetes status reason (Forbidden, NotFound, ...)."}, []string{"operation", "reason"}),
		quietRecreations: f.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "quiet_recreations_total",
			Help: "Times the quiet ConfigMap was found deleted and created again."}),
		quietTouches: f.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "quiet_touches_total",
			Help: "Patches of the quiet ConfigMap, one at the start of each expiry cycle."}),
		estimatedCapacity: f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "estimated_capacity_events",
			Help: "The exporter's own ConfigMap writes newer than the cache's oldest resourceVersion: a lower bound of the watch cache's capacity, equal to it where the exporter is the only ConfigMap writer."}),
	}
	for _, w := range []string{WatcherPlain, WatcherBookmarks} {
		m.watchOpen.WithLabelValues(w)
		m.relists.WithLabelValues(w)
	}
	for _, r := range []string{OK.String(), Expired.String(), Error.String(), "none"} {
		m.cycles.WithLabelValues(r)
	}
	for _, from := range []string{FromStale, FromBookmark} {
		for _, r := range []Outcome{OK, Expired, Error} {
			m.reconnects.WithLabelValues(from, r.String())
		}
	}
	m.estimatedCapacity.Set(nan)
	m.windowSeconds.Set(nan)
	m.windowRVs.Set(nan)
	m.distanceLive.Set(nan)
	return m
}

// Unregister removes every series of these metrics, for an apiserver that
// is gone.
func (m *Metrics) Unregister() {
	for _, c := range m.registered.collectors {
		m.registered.Unregister(c)
	}
}

// recordingRegisterer remembers what it registered, for Unregister.
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
