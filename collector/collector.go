// Package collector measures the kube-apiserver's watch cache: two
// long-lived watchers on a quiet ConfigMap, reconnect probes from a stale and
// from a BOOKMARK resourceVersion, expiry cycles, and the history window.
package collector

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/watchcache/watchcache-exporter/internal/owned"
	"github.com/watchcache/watchcache-exporter/internal/ratelog"
)

// Config of a Collector.
type Config struct {
	Namespace string
	// QuietName is the ConfigMap the watchers watch and the cycles touch.
	QuietName string
	// ProbeInterval between reconnect probes.
	ProbeInterval time.Duration
	// ProbeSettle is how long a probe waits for a 410 before it calls the
	// RV served. Default: min(ProbeInterval/4, 250ms).
	ProbeSettle time.Duration
	// Watch timeouts are drawn between these, as client-go's reflector
	// does (5 to 10 minutes by default).
	WatchTimeoutMin, WatchTimeoutMax time.Duration
	// NotReadyAfter: a watcher closed for longer makes Ready fail.
	// Default 30 s, so that a routine reconnect does not flap readiness.
	NotReadyAfter time.Duration
}

// farTooOldRV is older than any watch cache's history: the apiserver answers
// a watch from it with "too old resource version: 1 (O)", which gives O.
const farTooOldRV = "1"

// Collector runs the measurement; see the package comment.
type Collector struct {
	cfg    Config
	client kubernetes.Interface
	hist   *History
	m      *Metrics
	log    logr.Logger
	errLog *ratelog.Logger
	now    func() time.Time
	prober *Prober

	plain, bookmarks *watcher
	latestBookmarkRV atomic.Uint64
	windowKnown      bool // owned by Run's goroutine

	// The current expiry cycle; owned by Run's goroutine.
	cycle struct {
		active bool
		r0     uint64
		t0     time.Time
	}
}

// New builds a Collector of one apiserver, which client reaches. hist is
// shared with the load writer, whose patches teach it when each RV was
// written, and with the Collectors of other apiservers.
func New(cfg Config, client kubernetes.Interface, hist *History, reg prometheus.Registerer, log logr.Logger, now func() time.Time) (*Collector, error) {
	if cfg.ProbeInterval <= 0 {
		return nil, errors.New("probe interval must be positive")
	}
	if cfg.ProbeSettle <= 0 {
		cfg.ProbeSettle = min(cfg.ProbeInterval/4, 250*time.Millisecond)
	}
	if cfg.WatchTimeoutMin <= 0 {
		cfg.WatchTimeoutMin, cfg.WatchTimeoutMax = 5*time.Minute, 10*time.Minute
	}
	if cfg.WatchTimeoutMax < cfg.WatchTimeoutMin {
		return nil, fmt.Errorf("watch timeout range %s..%s is empty", cfg.WatchTimeoutMin, cfg.WatchTimeoutMax)
	}
	if cfg.NotReadyAfter <= 0 {
		cfg.NotReadyAfter = 30 * time.Second
	}
	c := &Collector{
		cfg:    cfg,
		client: client,
		hist:   hist,
		m:      NewMetrics(reg),
		log:    log,
		errLog: ratelog.New(log, 30*time.Second, now),
		now:    now,
		prober: NewProber(client, cfg.Namespace, cfg.QuietName, cfg.ProbeSettle, now),
	}
	newWatcher := func(name string, bookmarks bool) *watcher {
		return &watcher{
			name: name, bookmarks: bookmarks,
			client: client, ns: cfg.Namespace, quiet: cfg.QuietName,
			m: c.m, log: log, now: now,
			minTimeout: cfg.WatchTimeoutMin, maxTimeout: cfg.WatchTimeoutMax,
			onBookmark: c.observeBookmark,
			relist:     c.ensureQuiet,
		}
	}
	c.plain = newWatcher(WatcherPlain, false)
	c.bookmarks = newWatcher(WatcherBookmarks, true)
	return c, nil
}

func (c *Collector) observeBookmark(rv uint64, at time.Time) {
	c.latestBookmarkRV.Store(rv)
	// A BOOKMARK carries the cache's RV as of now: a point for the clock.
	c.hist.Observe(rv, at)
}

// ensureQuiet relists quiet, creating it again when it is missing (somebody
// deleted it), and returns the RV to watch from.
func (c *Collector) ensureQuiet(ctx context.Context) (uint64, error) {
	rv, created, err := c.getOrCreateQuiet(ctx)
	if created {
		c.m.quietRecreations.Inc()
		c.log.Info("the quiet ConfigMap was missing: created it again", "namespace", c.cfg.Namespace, "name", c.cfg.QuietName, "resourceVersion", rv)
	}
	return rv, err
}

func (c *Collector) getOrCreateQuiet(ctx context.Context) (uint64, bool, error) {
	rv, created, err := owned.Relist(ctx, c.client, c.cfg.Namespace, c.cfg.QuietName, owned.RoleQuiet)
	if err != nil {
		return 0, false, fmt.Errorf("list or create configmap %s/%s: %w", c.cfg.Namespace, c.cfg.QuietName, err)
	}
	return rv, created, nil
}

// Run measures until ctx ends, then closes its watches and returns.
func (c *Collector) Run(ctx context.Context) {
	// Both watchers start from quiet's RV as of before the first touch, so
	// that they see every touch.
	var rv uint64
	backoff := newBackoff(time.Second, 30*time.Second)
	for {
		var err error
		if rv, _, err = c.getOrCreateQuiet(ctx); err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		c.m.apiErrors.WithLabelValues("relist", reason(err)).Inc()
		c.errLog.Error("ensure", err, "retrying", "retryIn", backoff.peek())
		backoff.sleep(ctx)
	}
	var wg sync.WaitGroup
	wg.Go(func() { c.plain.run(ctx, rv) })
	wg.Go(func() { c.bookmarks.run(ctx, rv) })
	defer wg.Wait()

	tick := time.NewTicker(c.cfg.ProbeInterval)
	defer tick.Stop()
	for {
		c.probe(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// probe is one probe interval: start a cycle if none runs, probe from the
// stale RV, the latest BOOKMARK RV and a far-too-old RV at the same moment,
// and record what they say.
func (c *Collector) probe(ctx context.Context) {
	if !c.cycle.active {
		if !c.startCycle(ctx) {
			return
		}
	}
	var stale, bookmark, window ProbeResult
	bookmarkRV := c.latestBookmarkRV.Load()
	var wg sync.WaitGroup
	wg.Go(func() { stale = c.prober.Probe(ctx, strconv.FormatUint(c.cycle.r0, 10)) })
	wg.Go(func() { window = c.prober.Probe(ctx, farTooOldRV) })
	if bookmarkRV != 0 {
		wg.Go(func() { bookmark = c.prober.Probe(ctx, strconv.FormatUint(bookmarkRV, 10)) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return // shutting down: these results say nothing
	}

	c.record(FromStale, stale)
	if bookmarkRV != 0 {
		c.record(FromBookmark, bookmark)
	}
	c.recordWindow(window)
	if stale.Outcome == Expired {
		c.endCycle(stale, bookmark, bookmarkRV)
	}
}

func (c *Collector) startCycle(ctx context.Context) bool {
	rv, err := owned.SetKey(ctx, c.client, c.cfg.Namespace, c.cfg.QuietName, "touched", c.now().UTC().Format(time.RFC3339Nano))
	if isNotFound(err) {
		if _, err = c.ensureQuiet(ctx); err == nil {
			rv, err = owned.SetKey(ctx, c.client, c.cfg.Namespace, c.cfg.QuietName, "touched", c.now().UTC().Format(time.RFC3339Nano))
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			c.m.apiErrors.WithLabelValues("touch", reason(err)).Inc()
			c.errLog.Error("touch", err, "cannot touch the quiet ConfigMap to start an expiry cycle; retrying", "namespace", c.cfg.Namespace, "name", c.cfg.QuietName)
		}
		return false
	}
	t0 := c.now()
	c.m.quietTouches.Inc()
	c.hist.ObserveWrite(rv, t0)
	c.cycle.active, c.cycle.r0, c.cycle.t0 = true, rv, t0
	c.m.distanceLive.Set(nan)
	c.log.V(1).Info("expiry cycle started", "resourceVersion", rv)
	return true
}

func (c *Collector) record(from string, r ProbeResult) {
	c.m.reconnects.WithLabelValues(from, r.Outcome.String()).Inc()
	switch r.Outcome {
	case Expired:
		c.m.refusals.WithLabelValues(string(r.Refusal.Source)).Inc()
	case Error:
		c.m.apiErrors.WithLabelValues("probe", reason(r.Err)).Inc()
		c.errLog.Error("probe-"+from, r.Err, "reconnect probe failed", "from", from)
	}
}

// recordWindow turns the far-too-old probe's O into the window gauges.
func (c *Collector) recordWindow(r ProbeResult) {
	if r.Outcome == Error {
		c.m.apiErrors.WithLabelValues("probe", reason(r.Err)).Inc()
		c.errLog.Error("probe-window", r.Err, "window probe failed; keeping the last window values")
		return
	}
	if r.Outcome == Expired {
		c.m.refusals.WithLabelValues(string(r.Refusal.Source)).Inc()
	}
	known := r.Outcome == Expired && r.Refusal.Oldest != 0
	if known != c.windowKnown {
		c.windowKnown = known
		if known {
			c.log.Info("the window is known: the apiserver names its oldest resourceVersion", "oldestResourceVersion", r.Refusal.Oldest)
		} else {
			// The apiserver served RV 1 (its cache was built at RV 1 or
			// less and has dropped nothing yet: a new cluster), or refused
			// it without naming its oldest RV (etcd compaction: the watch
			// cache is off for configmaps).
			c.log.Info("the window is unknown: the apiserver does not name its oldest resourceVersion", "probe", r.Outcome.String(), "source", r.Refusal.Source)
		}
	}
	if !known {
		c.m.windowSeconds.Set(nan)
		c.m.windowRVs.Set(nan)
		c.m.oldestRV.Set(nan)
		c.m.distanceLive.Set(nan)
		c.m.estimatedCapacity.Set(nan)
		return
	}
	oldest := r.Refusal.Oldest
	c.m.oldestRV.Set(float64(oldest))
	if c.cycle.active {
		c.m.distanceLive.Set(float64(oldest) - float64(c.cycle.r0))
	}
	c.m.estimatedCapacity.Set(float64(c.hist.OwnWritesAfter(oldest)))
	if newest, _, ok := c.hist.Clock.Newest(); ok && newest >= oldest {
		c.m.newestRV.Set(float64(newest))
		c.m.windowRVs.Set(float64(newest - oldest))
	}
	// The cache's oldest event is oldest+1.
	if written, ok := c.hist.Clock.TimeOf(oldest + 1); ok {
		c.m.windowSeconds.Set(r.At.Sub(written).Seconds())
	} else {
		c.m.windowSeconds.Set(nan)
	}
}

func (c *Collector) endCycle(stale, bookmark ProbeResult, bookmarkRV uint64) {
	expiry := stale.At.Sub(c.cycle.t0).Seconds()
	c.m.expiry.Observe(expiry)
	c.m.expiryLast.Set(expiry)
	kv := []any{"expirySeconds", expiry, "staleResourceVersion", c.cycle.r0, "source", stale.Refusal.Source}
	if o := stale.Refusal.Oldest; o != 0 {
		d := float64(o) - float64(c.cycle.r0)
		c.m.distance.Observe(d)
		c.m.distanceLast.Set(d)
		kv = append(kv, "oldestResourceVersion", o, "distance", d)
	}
	bm := "none" // no BOOKMARK yet
	if bookmarkRV != 0 {
		bm = bookmark.Outcome.String()
		kv = append(kv, "bookmarkResourceVersion", bookmarkRV)
	}
	c.m.cycles.WithLabelValues(bm).Inc()
	c.log.Info("expiry cycle complete: stale resourceVersion refused with 410", append(kv, "bookmarkReconnect", bm)...)
	c.cycle.active = false
}

// Ready fails until both watchers have opened, and when either has been
// closed for longer than NotReadyAfter.
func (c *Collector) Ready() error {
	var errs []error
	for _, w := range []*watcher{c.plain, c.bookmarks} {
		open, ever, since := w.state()
		switch {
		case !ever:
			errs = append(errs, fmt.Errorf("%s watcher not open yet", w.name))
		case !open && c.now().Sub(since) > c.cfg.NotReadyAfter:
			errs = append(errs, fmt.Errorf("%s watcher closed for %s", w.name, c.now().Sub(since).Round(time.Second)))
		}
	}
	return errors.Join(errs...)
}

// Unregister removes this Collector's series.
func (c *Collector) Unregister() { c.m.Unregister() }
