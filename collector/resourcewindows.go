package collector

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/dynamic"

	"github.com/watchcache/watchcache-exporter/internal/promopts"
	"github.com/watchcache/watchcache-exporter/internal/ratelog"
	"github.com/watchcache/watchcache-exporter/resources"
	"github.com/watchcache/watchcache-exporter/rvclock"
)

// NoSuchName is the field selector value of the resource probes: no object
// of any resource can have it ("/" is refused in every name), so a served
// probe watch sends nothing.
const NoSuchName = "watchcache-exporter/no-such-name"

// ResourcesConfig says which resources' windows a Collector measures
// besides the ConfigMaps', and how.
type ResourcesConfig struct {
	// Resources to measure, as they are now; configmaps are left out (the
	// quiet ConfigMap's probes measure them).
	Resources *resources.Set
	// Client reaches the same apiserver as the Collector's.
	Client dynamic.Interface
	// Pace: how often each resource is probed.
	Pace resources.Pace
	// Settle: how long a probe waits for a 410 before it calls RV 1 served.
	Settle time.Duration
	// Parallel probes at most; default 4.
	Parallel int
	// StaleAfter failed intervals a resource's gauges go to NaN; default 3.
	StaleAfter int
}

// ResourceWindows measures, without writing, the window of each resource's
// watch cache on one apiserver: every interval one watch from RV 1 across
// all namespaces, selected by a name that cannot exist, is refused with
// "too old resource version: 1 (O)", and the RV clock turns O into seconds.
// A resource whose cache is off is refused by etcd instead, which names no
// O: the oldest revision etcd has kept is then found by bisection, once per
// compaction.
type resourceWindows struct {
	cfg    ResourcesConfig
	hist   *rvclock.History
	log    logr.Logger
	errLog *ratelog.Logger
	m      resourceMetrics

	// Owned by Run's goroutine.
	measured   []resources.Resource              // the last round's
	probed     map[resources.Name]*resourceProbe // theirs
	interval   time.Duration                     // the last round's, as it took
	etcdOldest map[*rvclock.Clock]uint64         // per etcd (its RV clock): the smallest RV it served; 0 or absent: not known
}

type resourceProbe struct {
	prober      *Prober
	failedSince time.Time // zero while its probes answer
	gone        bool      // its last probe found its API gone (404)
}

// The columns of resourceMetrics.perResource.
const (
	cacheOnCol = iota
	intervalCol
)

type resourceMetrics struct {
	windows      *windowVecs // the Collector's
	perResource  *gaugeTable // columns: cacheOnCol, intervalCol
	errors       *prometheus.CounterVec
	searchProbes prometheus.Counter
}

// newResourceWindows measures cfg.Resources; windows are the Collector's
// window series, the others go to reg, and the per-resource table through t.
func newResourceWindows(cfg ResourcesConfig, windows *windowVecs, hist *rvclock.History, reg prometheus.Registerer, t tables, log logr.Logger) *resourceWindows {
	if cfg.Settle <= 0 {
		cfg.Settle = 250 * time.Millisecond
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 4
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = 3
	}
	f := promauto.With(reg)
	w := &resourceWindows{
		cfg: cfg, hist: hist, log: log,
		errLog:     ratelog.New(log, 30*time.Second, time.Now),
		probed:     map[resources.Name]*resourceProbe{},
		etcdOldest: map[*rvclock.Clock]uint64{},
		m: resourceMetrics{
			windows: windows,
			perResource: t.newGaugeTable(promopts.Gauge("resource_watch_cache_enabled",
				"1 when the resource's watch cache answers the probes (its window is the cache's), 0 when etcd does (the cache is off, --watch-cache-sizes=<resource>#0: the window is etcd's compaction). NaN until a probe tells (RV 1 still served)."),
				promopts.Gauge("resource_probe_interval_seconds",
					"Time between two window probes of the resource: --resources.interval, stretched so that the probes and object counts of every resource stay within --resources.budget requests a second per apiserver, or longer when a round of probes took longer.")),
			errors: f.NewCounterVec(promopts.Counter("resource_probe_errors_total",
				"Failed window probes of a resource, by Kubernetes status reason (Forbidden: RBAC; TooManyRequests: flow control)."), []string{"group", "resource", "reason"}),
			searchProbes: f.NewCounter(promopts.Counter("resource_compaction_probes_total",
				"Watches sent to find etcd's oldest revision for resources whose watch cache is off: about log2(revisions) after each compaction, one per interval otherwise.")),
		},
	}
	return w
}

// Run probes at the configured pace until ctx ends.
func (w *resourceWindows) Run(ctx context.Context) {
	w.cfg.Pace.Run(ctx, w.cfg.Resources, w.round, func(rs []resources.Resource, ivl time.Duration) {
		w.interval = ivl
		for _, r := range w.measured {
			w.m.perResource.set(r.Group, r.Resource, intervalCol, ivl.Seconds())
		}
	})
}

// follow starts measuring the resources new in rs and deletes the series of
// those gone from it.
func (w *resourceWindows) follow(rs []resources.Resource) {
	rs = slices.DeleteFunc(slices.Clone(rs), func(r resources.Resource) bool { return r.Group == "" && r.Resource == "configmaps" })
	added, removed := resources.Diff(w.measured, rs)
	w.measured = rs
	opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", NoSuchName).String()}
	for _, r := range added {
		w.probed[r.Key()] = &resourceProbe{prober: NewWatchProber(w.cfg.Client.Resource(r.GVR()).Watch, opts, w.cfg.Settle)}
		w.m.windows.setUnknown(r.Group, r.Resource)
		w.m.perResource.set(r.Group, r.Resource, cacheOnCol, nan)
		w.m.errors.WithLabelValues(r.Group, r.Resource, "Forbidden")
	}
	for _, r := range removed {
		delete(w.probed, r.Key())
		w.m.windows.delete(r.Group, r.Resource)
		w.m.perResource.delete(r.Group, r.Resource)
		w.m.errors.DeletePartialMatch(prometheus.Labels{"group": r.Group, "resource": r.Resource})
	}
	if w.interval == 0 {
		w.interval = w.cfg.Pace.For(len(rs))
	}
}

// round probes every resource once, Parallel at a time.
func (w *resourceWindows) round(ctx context.Context, rs []resources.Resource) {
	w.follow(rs)
	results := make([]ProbeResult, len(w.measured))
	sem := make(chan struct{}, w.cfg.Parallel)
	var wg sync.WaitGroup
	for i, r := range w.measured {
		p := w.probed[r.Key()].prober
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			results[i] = p.Probe(ctx, farTooOldRV)
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	checked := map[*rvclock.Clock]bool{} // one search per etcd and round
	for i, r := range w.measured {
		res := results[i]
		clk, placed := w.hist.ClockOf(r.Name())
		if placed && res.Outcome == Expired && res.Refusal.Source == SourceEtcd && !checked[clk] {
			checked[clk] = true
			w.searchEtcd(ctx, w.probed[r.Key()].prober, clk)
		}
		w.record(w.probed[r.Key()], r, res)
	}
}

// record sets one resource's gauges from its probe's answer.
func (w *resourceWindows) record(p *resourceProbe, r resources.Resource, res ProbeResult) {
	g, rs := r.Group, r.Resource
	if res.Outcome == Error && apierrors.IsNotFound(res.Err) {
		// Its API is gone (a CRD deleted): its series go now, not at the
		// next reading of discovery, which drops it from the set.
		if !p.gone {
			p.gone = true
			w.log.Info("a resource is no longer served: its series are dropped until it is again", "resource", r.Name())
		}
		w.m.windows.delete(g, rs)
		w.m.perResource.delete(g, rs)
		w.m.errors.DeletePartialMatch(prometheus.Labels{"group": g, "resource": rs})
		p.failedSince = time.Time{}
		return
	}
	p.gone = false
	if res.Outcome == Error {
		w.m.errors.WithLabelValues(g, rs, promopts.Reason(res.Err)).Inc()
		w.errLog.Error("resource-"+r.Name(), res.Err, "window probe of a resource failed", "resource", r.Name())
		if p.failedSince.IsZero() {
			p.failedSince = res.At
		}
		if res.At.Sub(p.failedSince) >= time.Duration(w.cfg.StaleAfter-1)*w.interval {
			w.setUnknown(r)
		}
		return
	}
	p.failedSince = time.Time{}
	// Timed by the RVs of the resource's own etcd, once its first object
	// count has said which that is.
	clk, placed := w.hist.ClockOf(r.Name())
	if !placed {
		w.setUnknown(r)
		w.errLog.Info("resource-unplaced-"+r.Name(), "window unknown: which etcd holds the resource is not known yet (its first object count)", "resource", r.Name())
		return
	}
	var oldest uint64
	switch {
	case res.Outcome == OK:
		// RV 1 served: nothing has left the history since RV 1 (a young
		// cluster), whichever store answered.
		oldest = 1
		w.m.perResource.set(g, rs, cacheOnCol, nan)
	case res.Refusal.Source == SourceWatchCache && res.Refusal.Oldest != 0:
		oldest = res.Refusal.Oldest
		w.m.perResource.set(g, rs, cacheOnCol, 1)
	case res.Refusal.Source == SourceEtcd:
		w.m.perResource.set(g, rs, cacheOnCol, 0)
		oldest = w.etcdOldest[clk]
	}
	if oldest == 0 {
		w.setUnknown(r)
		msg := "window unknown: the apiserver refused RV 1 without naming its oldest resourceVersion"
		if res.Refusal.Source == SourceEtcd {
			msg = "window unknown: the watch cache is off and etcd's oldest revision is not found yet"
		}
		w.errLog.Info("resource-unknown-"+r.Name(), msg, "resource", r.Name(), "source", res.Refusal.Source)
		return
	}
	rvs := nan
	if newest, _, ok := clk.Newest(); ok && newest >= oldest {
		rvs = float64(newest - oldest)
	}
	seconds, lower := windowSeconds(clk, oldest, res.Answered)
	w.m.windows.set(Window{Group: g, Resource: rs, Oldest: oldest, Seconds: seconds, LowerBound: lower == 1}, rvs)
}

func (w *resourceWindows) setUnknown(r resources.Resource) {
	w.m.windows.setUnknown(r.Group, r.Resource)
}

// searchEtcd finds the smallest RV etcd still serves a watch from, through
// p, a resource whose cache is off, up to the newest RV of clk, its etcd's
// clock; etcd's compaction is one for every resource in that etcd.
// Compaction only moves forward: while the last one found is served, it
// still holds (its predecessor was refused); once refused, the new one lies
// between it and the newest RV, found by bisection.
func (w *resourceWindows) searchEtcd(ctx context.Context, p *Prober, clk *rvclock.Clock) {
	served := func(rv uint64) (ok, known bool) {
		w.m.searchProbes.Inc()
		r := p.Probe(ctx, strconv.FormatUint(rv, 10))
		switch {
		case r.Outcome == OK:
			return true, true
		case r.Outcome == Expired && r.Refusal.Source == SourceEtcd:
			return false, true
		}
		return false, false
	}
	lo := uint64(1) // refused: the probe from RV 1 was
	if w.etcdOldest[clk] > 1 {
		ok, known := served(w.etcdOldest[clk])
		if !known {
			return // keep the last one found; the next round tries again
		}
		if ok {
			return
		}
		lo = w.etcdOldest[clk]
	}
	hi, _, ok := clk.Newest()
	if !ok || hi <= lo {
		w.etcdOldest[clk] = 0
		return
	}
	if ok, known := served(hi); !ok || !known {
		w.etcdOldest[clk] = 0 // the clock lags: the next round tries again
		return
	}
	if hi, ok = rvclock.OldestServed(lo, hi, served); !ok {
		w.etcdOldest[clk] = 0
		return
	}
	if hi != w.etcdOldest[clk] {
		w.log.V(1).Info("etcd's oldest revision found, for resources whose watch cache is off", "oldestResourceVersion", hi)
	}
	w.etcdOldest[clk] = hi
}
