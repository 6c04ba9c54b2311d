// Package collector is one apiserver's measurement of its watch cache: two
// long-lived watchers on a quiet ConfigMap, reconnect probes from a stale and
// from a BOOKMARK resourceVersion, expiry cycles, the history window, the
// detection of cache resets, and the predicted window. Its lifetime is that
// of the apiserver in the fleet; what it shares with other apiservers' (the
// RV history, the write rate) comes in through New.
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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/watchcache/watchcache-exporter/internal/kube"
	"github.com/watchcache/watchcache-exporter/internal/owned"
	"github.com/watchcache/watchcache-exporter/internal/pause"
	"github.com/watchcache/watchcache-exporter/internal/promopts"
	"github.com/watchcache/watchcache-exporter/internal/ratelog"
	"github.com/watchcache/watchcache-exporter/model"
	"github.com/watchcache/watchcache-exporter/rvclock"
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
	// StaleAfter failed probe intervals the window gauges go to NaN.
	// Default 3.
	StaleAfter int
	// Watch timeouts are drawn between these, as client-go's reflector
	// does (5 to 10 minutes by default).
	WatchTimeoutMin, WatchTimeoutMax time.Duration
	// NotReadyAfter: a watcher closed for longer makes Ready fail.
	// Default 30 s, so that a routine reconnect does not flap readiness.
	NotReadyAfter time.Duration
	// HistoryWindow is the apiserver's, for the prediction (75 s default).
	HistoryWindow time.Duration
	// Resources: other resources whose windows to measure too.
	Resources ResourcesConfig
	// Labels are constant labels on every series of this Collector: the
	// daemon's apiserver label.
	Labels prometheus.Labels
	// OnCycle, when set, gets every expiry cycle as it ends: the experiment
	// command's report. It is called from the probe loop, and must return
	// at once.
	OnCycle func(Cycle)
}

// Cycle is one expiry cycle, from the touch of quiet to the first 410 of
// its RV, with what a client holding that RV or the latest BOOKMARK's
// meets then.
type Cycle struct {
	StaleRV uint64    // quiet's RV as the touch left it
	Started time.Time // the touch
	Refused time.Time // the answer that refused StaleRV
	Refusal Refusal
	Message string // the apiserver's own words
	Writes  uint64 // the exporter's writes from the touch to the refusal
	// InCache is the exporter's writes newer than the refusal's O as it
	// arrived: the events the cache held then, when nothing else writes
	// configmaps.
	InCache int
	// The latest BOOKMARK, when there was one (RV 0: none), and the
	// reconnect from its RV at the moment StaleRV was refused.
	BookmarkRV     uint64
	BookmarkAt     time.Time
	BookmarkResult ProbeResult
	// FirstBookmark is the first BOOKMARK of the bookmark watcher: its RV,
	// and how long after the watch opened it came; PlainEvents are the
	// events the plain watcher saw so far.
	FirstBookmarkRV    uint64
	FirstBookmarkAfter time.Duration
	PlainEvents        uint64
	// RelistRV is what a list of quiet said right after: where a client
	// that relists starts again. 0 when the list failed (RelistErr).
	RelistRV  uint64
	RelistErr error
}

// farTooOldRV is older than any watch cache's history: the apiserver answers
// a watch from it with "too old resource version: 1 (O)", which gives O.
const farTooOldRV = "1"

// Collector runs the measurement; see the package comment.
type Collector struct {
	cfg    Config
	client kube.Core
	store  *owned.Store
	hist   *rvclock.History
	rate   func() float64
	m      *Metrics
	pred   *model.Predictor
	log    logr.Logger
	errLog *ratelog.Logger
	prober *Prober

	plain, bookmarks *watcher
	resources        *resourceWindows // nil without Config.Resources
	latestBookmarkRV atomic.Uint64
	latestBookmarkAt atomic.Int64 // unix ns
	firstBookmark    atomic.Pointer[firstBookmark]

	// Owned by Run's goroutine.
	windowKnown bool
	lastSuccess time.Time // of the window probe
	holdUntil   time.Time // no probe before: a 429 asked for a pause
	stale       bool      // the window gauges are NaN for failed probes
	last        struct {  // at the last probe that read O
		known          bool
		oldest, newest uint64
		at             time.Time // its answer
		window         float64   // the window it measured, s (NaN: unknown)
	}
	cycle struct {
		active bool
		r0     uint64
		t0     time.Time
		w0     uint64    // own writes before the touch
		served time.Time // the last answer that served r0 (at first the touch)
	}
}

// minCapacity is the smallest capacity of a watch cache: it holds at least
// this many events however it shrinks.
const minCapacity = 100

type firstBookmark struct {
	rv    uint64
	after time.Duration
}

// New builds the Collector of one apiserver, which client reaches; store
// says whether quiet is the exporter's to touch. hist is
// shared with the load writer, whose patches teach it when each RV was
// written, and with the Collectors of other apiservers; rate is the write
// rate the prediction takes.
func New(cfg Config, client kube.Core, store *owned.Store, hist *rvclock.History, rate func() float64, reg prometheus.Registerer, log logr.Logger) (*Collector, error) {
	if cfg.ProbeInterval <= 0 {
		return nil, errors.New("ProbeInterval must be positive")
	}
	if cfg.ProbeSettle <= 0 {
		cfg.ProbeSettle = min(cfg.ProbeInterval/4, 250*time.Millisecond)
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = 3
	}
	if cfg.WatchTimeoutMin <= 0 {
		cfg.WatchTimeoutMin, cfg.WatchTimeoutMax = 5*time.Minute, 10*time.Minute
	}
	if cfg.WatchTimeoutMax < cfg.WatchTimeoutMin {
		return nil, fmt.Errorf("WatchTimeoutMax %s is less than WatchTimeoutMin %s", cfg.WatchTimeoutMax, cfg.WatchTimeoutMin)
	}
	if cfg.NotReadyAfter <= 0 {
		cfg.NotReadyAfter = 30 * time.Second
	}
	if cfg.HistoryWindow <= 0 {
		cfg.HistoryWindow = 75 * time.Second
	}
	rec := &recordingRegisterer{Registerer: prometheus.WrapRegistererWith(cfg.Labels, reg)}
	tabs := tables{reg: &recordingRegisterer{Registerer: reg}, labels: cfg.Labels}
	errLog := ratelog.New(log, 30*time.Second, time.Now)
	c := &Collector{
		cfg:    cfg,
		client: client,
		store:  store,
		hist:   hist,
		rate:   rate,
		m:      newMetrics(rec, tabs),
		pred:   model.NewPredictor(cfg.HistoryWindow, time.Now(), rec),
		log:    log,
		errLog: errLog,
		prober: NewProber(client, cfg.Namespace, cfg.QuietName, cfg.ProbeSettle),
	}
	newWatcher := func(name string, bookmarks bool) *watcher {
		return &watcher{
			name: name, bookmarks: bookmarks,
			client: client, ns: cfg.Namespace,
			opts: metav1.ListOptions{FieldSelector: owned.NameSelector(cfg.QuietName)},
			m:    c.m, log: log, errLog: errLog,
			minTimeout: cfg.WatchTimeoutMin, maxTimeout: cfg.WatchTimeoutMax,
			onBookmark: c.observeBookmark,
			relist:     c.ensureQuiet,
		}
	}
	c.plain = newWatcher(WatcherPlain, false)
	// Quiet's marks are checked as every change of it arrives: somebody
	// taking it is seen at once, not at the next touch.
	c.plain.onChange = store.Observe
	c.bookmarks = newWatcher(WatcherBookmarks, true)
	if cfg.Resources.Resources != nil {
		if cfg.Resources.Pace.Interval <= 0 || cfg.Resources.Client == nil {
			return nil, errors.New("Resources needs a Pace.Interval and a Client")
		}
		c.resources = newResourceWindows(cfg.Resources, c.m.windows, hist, rec, tabs, log.WithName("resources"))
	}
	return c, nil
}

func (c *Collector) observeBookmark(rv uint64, at time.Time, first time.Duration) {
	if first > 0 {
		c.firstBookmark.CompareAndSwap(nil, &firstBookmark{rv, first})
	}
	c.latestBookmarkAt.Store(at.UnixNano())
	c.latestBookmarkRV.Store(rv)
	// A BOOKMARK carries the cache's RV as of now: a point for the clock.
	c.hist.Observe(rv, at)
}

// ensureQuiet relists quiet, creating it again when it is missing (somebody
// deleted it), and returns the RV to watch from. A quiet that is not the
// exporter's any more is still watched (a read), but not touched.
func (c *Collector) ensureQuiet(ctx context.Context) (uint64, error) { return c.relistQuiet(ctx, true) }

// relistQuiet is ensureQuiet; again says whether a missing quiet is news
// (a recreation) rather than the first start.
func (c *Collector) relistQuiet(ctx context.Context, again bool) (uint64, error) {
	rv, created, err := c.store.Relist(ctx, c.client, c.cfg.QuietName, owned.RoleQuiet)
	if errors.Is(err, owned.ErrNotOwned) {
		return rv, nil // the store said so, and no cycle starts
	}
	if err != nil {
		return 0, fmt.Errorf("list or create configmap %s/%s: %w", c.cfg.Namespace, c.cfg.QuietName, err)
	}
	if created && again {
		c.m.quietRecreations.Inc()
		c.log.Info("the quiet ConfigMap was missing: created it again", "namespace", c.cfg.Namespace, "name", c.cfg.QuietName, "resourceVersion", rv)
	}
	return rv, nil
}

// Run measures until ctx ends, then closes its watches and returns.
func (c *Collector) Run(ctx context.Context) {
	// Both watchers start from quiet's RV as of before the first touch, so
	// that they see every touch.
	var rv uint64
	delay := watchBackoff.DelayWithReset(clock.RealClock{}, backoffReset)
	for {
		var err error
		if rv, err = c.relistQuiet(ctx, false); err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		c.m.apiErrors.WithLabelValues("relist", promopts.Reason(err)).Inc()
		c.errLog.Error("ensure", err, "retrying")
		if pause.For(ctx, delay()) != nil {
			return
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { c.plain.run(ctx, rv) })
	wg.Go(func() { c.bookmarks.run(ctx, rv) })
	if c.resources != nil {
		wg.Go(func() { c.resources.Run(ctx) })
	}
	defer wg.Wait()
	c.lastSuccess = time.Now()
	wait.NonSlidingUntilWithContext(ctx, c.probe, c.cfg.ProbeInterval)
}

// probe is one probe interval: start a cycle if none runs, probe from a
// far-too-old RV (the window), the cycle's stale RV and the latest BOOKMARK
// RV at the same moment, and record what they say. The window probe runs
// whether or not a cycle could start.
func (c *Collector) probe(ctx context.Context) {
	if time.Now().Before(c.holdUntil) {
		// The apiserver asked for a pause (429 or 503 with Retry-After): a
		// gap in probing, whose windows go stale as an outage's do.
		c.checkStale()
		return
	}
	if !c.cycle.active {
		c.startCycle(ctx)
	}
	var stale, bookmark, window ProbeResult
	var snap rvclock.Snapshot
	var staleInCache int
	var staleWrites uint64
	bookmarkAt := time.Unix(0, c.latestBookmarkAt.Load())
	bookmarkRV := c.latestBookmarkRV.Load()
	var wg sync.WaitGroup
	wg.Go(func() {
		window = c.prober.Probe(ctx, farTooOldRV)
		// What the exporter knows as the answer arrives: read later, the
		// writes of the other probes' settle time would count too.
		snap = c.hist.SnapshotAfter(window.Refusal.Oldest)
	})
	if c.cycle.active {
		wg.Go(func() {
			stale = c.prober.Probe(ctx, strconv.FormatUint(c.cycle.r0, 10))
			// What the exporter knows as the answer arrives, as for the
			// window's snapshot.
			staleInCache, staleWrites = c.hist.OwnWritesAfter(stale.Refusal.Oldest), c.hist.OwnWrites()
		})
	}
	if bookmarkRV != 0 {
		wg.Go(func() { bookmark = c.prober.Probe(ctx, strconv.FormatUint(bookmarkRV, 10)) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return // shutting down: these results say nothing
	}
	if c.cycle.active {
		c.record(FromStale, stale)
	}
	if bookmarkRV != 0 {
		c.record(FromBookmark, bookmark)
	}
	c.record("", window)
	c.pauseAsAsked(stale, bookmark, window)
	c.pred.Advance(time.Now(), c.rate())
	reset := c.recordWindow(window, stale, snap)
	if !c.cycle.active {
		return
	}
	switch gap := stale.At.Sub(c.cycle.served); {
	case stale.Outcome == OK:
		c.cycle.served = stale.Answered
	case stale.Outcome != Expired:
	case reset:
		c.discardCycle("cache_reset", "the stale resourceVersion was refused because the cache was reset, not because it expired")
	case gap > c.gapAfter():
		// No answer for a while (an outage, or a pause asked for): the 410
		// came somewhere in the gap, and stamping it now would lengthen
		// the expiry by up to the gap.
		c.discardCycle("probe_gap", "no probe was answered for "+gap.Round(time.Second).String()+" before the refusal: the expiry lies somewhere in that gap",
			"servedUntil", c.cycle.served, "refusedBy", stale.Answered)
	default:
		c.endCycle(ctx, stale, staleInCache, staleWrites, bookmark, bookmarkRV, bookmarkAt)
	}
}

// gapAfter is how long the probes may go unanswered before the
// measurement across them is a guess: as long as the window gauges stay.
func (c *Collector) gapAfter() time.Duration {
	return time.Duration(c.cfg.StaleAfter) * c.cfg.ProbeInterval
}

func (c *Collector) discardCycle(reason, why string, kv ...any) {
	c.m.cyclesDiscarded.WithLabelValues(reason).Inc()
	c.log.Info("expiry cycle discarded: "+why, append([]any{"staleResourceVersion", c.cycle.r0, "reason", reason}, kv...)...)
	c.cycle.active = false
}

// pauseAsAsked pauses the probes for as long as an answer's Retry-After
// asks, up to pause.MaxAsked.
func (c *Collector) pauseAsAsked(results ...ProbeResult) {
	for _, r := range results {
		d, asked := pause.Asked(r.Err)
		if d <= 0 {
			continue
		}
		c.m.pauses.WithLabelValues(strconv.FormatBool(asked > d)).Inc()
		if asked > d {
			c.errLog.Error("pause-capped", r.Err, "the apiserver asked for a longer pause of the probes than the exporter takes", "asked", asked, "pause", d)
		}
		if r.Answered.Add(d).After(c.holdUntil) {
			c.holdUntil = r.Answered.Add(d)
			c.log.V(1).Info("probes paused as the apiserver asked", "for", d, "reason", promopts.Reason(r.Err))
		}
	}
}

func (c *Collector) startCycle(ctx context.Context) {
	touch := func() (uint64, error) {
		return c.store.Touch(ctx, c.client, c.cfg.QuietName, "touched", time.Now().UTC().Format(time.RFC3339Nano))
	}
	rv, err := touch()
	if apierrors.IsNotFound(err) {
		if _, err = c.ensureQuiet(ctx); err == nil {
			rv, err = touch()
		}
	}
	if errors.Is(err, owned.ErrNotOwned) {
		return // the store said so; the window is still probed
	}
	if err != nil {
		if ctx.Err() == nil {
			c.m.apiErrors.WithLabelValues("touch", promopts.Reason(err)).Inc()
			c.errLog.Error("touch", err, "cannot touch the quiet ConfigMap to start an expiry cycle; the window is still probed", "namespace", c.cfg.Namespace, "name", c.cfg.QuietName)
		}
		return
	}
	t0 := time.Now()
	c.m.quietTouches.Inc()
	c.hist.ObserveWrite(rv, t0)
	c.cycle.active, c.cycle.r0, c.cycle.t0, c.cycle.w0, c.cycle.served = true, rv, t0, c.hist.OwnWrites(), t0
	c.m.distanceLive.Set(nan)
	c.log.V(1).Info("expiry cycle started", "resourceVersion", rv)
}

// record counts one probe's result; from "" is the window probe, which is
// not a reconnect.
func (c *Collector) record(from string, r ProbeResult) {
	if from != "" {
		c.m.reconnects.WithLabelValues(from, r.Outcome.String()).Inc()
	}
	switch r.Outcome {
	case Expired:
		c.m.refusals.WithLabelValues(string(r.Refusal.Source)).Inc()
	case Error:
		if from == "" {
			from = "window"
		}
		c.m.apiErrors.WithLabelValues("probe", promopts.Reason(r.Err)).Inc()
		c.errLog.Error("probe-"+from, r.Err, "probe failed", "from", from)
	}
}

// recordWindow turns the far-too-old probe's O into the window gauges, and
// says whether the cache was reset since the last probe. The stale probe's
// refusal names O too, and stands in when the window probe failed.
func (c *Collector) recordWindow(window, stale ProbeResult, snap rvclock.Snapshot) (reset bool) {
	if window.Outcome == Error {
		c.checkStale()
		if stale.Outcome == Expired && stale.Refusal.Oldest != 0 {
			return c.checkReset(stale.Refusal.Oldest, snap.Newest, stale.Answered, nan)
		}
		return false
	}
	c.lastSuccess = window.Answered
	c.m.lastProbeSuccess.Set(float64(window.Answered.UnixNano()) / 1e9)
	if c.stale {
		c.stale = false
		c.log.Info("window probe answers again")
	}
	// Served from RV 1: the cache was built at RV 1 or less and has dropped
	// nothing yet (a young cluster); its window is at least the clock's.
	oldest := window.Refusal.Oldest
	if window.Outcome == OK {
		oldest = 1
	}
	known := oldest != 0
	if known != c.windowKnown {
		c.windowKnown = known
		if known {
			c.log.Info("the window is known: the apiserver names its oldest resourceVersion, or serves RV 1", "oldestResourceVersion", oldest)
		} else {
			// Refused without naming its oldest RV (etcd compaction: the
			// watch cache is off for configmaps).
			c.log.Info("the window is unknown: the apiserver does not name its oldest resourceVersion", "source", window.Refusal.Source)
		}
	}
	if !known {
		c.setWindowUnknown()
		return false
	}
	seconds, lower := windowSeconds(c.hist.Clock, oldest, window.Answered)
	reset = c.checkReset(oldest, snap.Newest, window.Answered, seconds)
	if c.cycle.active {
		c.m.distanceLive.Set(rvDistance(oldest, c.cycle.r0))
	}
	c.m.estimatedCapacity.Set(float64(snap.OwnWritesAfter))
	rvs := nan
	if snap.Newest >= oldest {
		c.m.newestRV.Set(float64(snap.Newest))
		rvs = float64(snap.Newest - oldest)
	} else {
		c.m.newestRV.Set(nan)
	}
	c.m.windows.set(Window{Resource: "configmaps", Oldest: oldest, Seconds: seconds, LowerBound: lower == 1}, rvs)
	return reset
}

// checkStale turns the window gauges to NaN once the window probe has gone
// unanswered for StaleAfter probe intervals.
func (c *Collector) checkStale() {
	if !c.stale && time.Since(c.lastSuccess) >= c.gapAfter() {
		c.stale = true
		c.log.Info("window unknown: the window probe has not been answered for "+strconv.Itoa(c.cfg.StaleAfter)+" probe intervals", "since", c.lastSuccess)
		c.setWindowUnknown()
	}
}

// checkReset compares the cache's oldest RV, as answered at at, with the
// last probe's; seconds is the window it gives (NaN: unknown). Events leave
// the cache oldest first: an oldest RV at or past the newest RV known at the
// last probe means the cache was rebuilt from a fresh list (a restart of the
// apiserver or a relist of its own), unless the cache could have dropped
// that write by itself since (see dropped). Then, as after a long outage of
// this apiserver, nothing tells a reset from the window's normal progress,
// and none is counted.
func (c *Collector) checkReset(oldest, newest uint64, at time.Time, seconds float64) bool {
	prev := c.last
	c.last.known, c.last.oldest, c.last.newest, c.last.at, c.last.window = true, oldest, max(newest, oldest), at, seconds
	if !prev.known || oldest <= prev.oldest || oldest < prev.newest {
		return false
	}
	if c.dropped(prev.newest, prev.window, prev.at, newest, at) {
		c.m.resetsUnknown.Inc()
		c.log.Info("the oldest resourceVersion is past every write known at the last answered probe, which the cache may have dropped by itself since: not counted as a reset",
			"oldestResourceVersion", oldest, "newestKnownAtLastProbe", prev.newest, "lastProbeAnswered", prev.at, "gap", at.Sub(prev.at).Round(time.Second))
		return false
	}
	c.m.cacheResets.Inc()
	c.pred.Reset(time.Now())
	c.log.Info("the apiserver's watch cache was reset (a restart, or a relist of its own): every older resourceVersion is refused; the prediction starts again",
		"oldestResourceVersion", oldest, "previousOldest", prev.oldest, "newestKnownAtLastProbe", prev.newest)
	return true
}

// dropped says whether a cache that was not rebuilt could have dropped the
// write at rv by now (at), rv having been the newest known at a probe that
// measured window (s, NaN: unknown) answered at then, and newest the newest
// RV known now. The cache holds at least minCapacity events, so fewer
// resourceVersions since rv cannot have pushed it out. Otherwise it keeps an
// event for its history window (it grows instead of dropping younger ones),
// or at the capacity's cap for the window measured last: rv may be gone
// once it is that old.
func (c *Collector) dropped(rv uint64, window float64, then time.Time, newest uint64, at time.Time) bool {
	if newest < rv+minCapacity {
		return false
	}
	keep := c.cfg.HistoryWindow.Seconds()
	if window < keep { // false for NaN
		keep = window
	}
	age, _, ok := c.hist.Clock.Age(rv, at)
	if !ok {
		age = at.Sub(then).Seconds() // at least the gap since that probe
	}
	return age >= keep
}

// windowSeconds is the window of a cache whose oldest servable RV is
// oldest, as of at: the age of its oldest event, oldest+1. When the clock
// does not remember that far back, the age of the oldest RV it does is a
// lower bound (lower is 1); NaN when the event is newer than any RV known.
func windowSeconds(clk *rvclock.Clock, oldest uint64, at time.Time) (seconds, lower float64) {
	s, lowerBound, ok := clk.Age(oldest+1, at)
	switch {
	case !ok:
		return nan, nan
	case lowerBound:
		return s, 1
	}
	return s, 0
}

func (c *Collector) setWindowUnknown() {
	c.m.windows.setUnknown("", "configmaps")
	for _, g := range []prometheus.Gauge{c.m.newestRV, c.m.distanceLive, c.m.estimatedCapacity} {
		g.Set(nan)
	}
}

func (c *Collector) endCycle(ctx context.Context, stale ProbeResult, inCache int, writes uint64, bookmark ProbeResult, bookmarkRV uint64, bookmarkAt time.Time) {
	expiry := stale.At.Sub(c.cycle.t0).Seconds()
	c.m.expiry.Observe(expiry)
	c.m.expiryLast.Set(expiry)
	kv := []any{"expirySeconds", expiry, "staleResourceVersion", c.cycle.r0, "source", stale.Refusal.Source}
	if o := stale.Refusal.Oldest; o != 0 {
		d := rvDistance(o, c.cycle.r0)
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
	if c.cfg.OnCycle == nil {
		return
	}
	cy := Cycle{
		StaleRV: c.cycle.r0, Started: c.cycle.t0, Refused: stale.Answered,
		Refusal: stale.Refusal, Message: stale.Message,
		Writes: writes - c.cycle.w0, InCache: inCache,
		PlainEvents: c.plain.events.Load(),
	}
	if bookmarkRV != 0 {
		cy.BookmarkRV, cy.BookmarkAt, cy.BookmarkResult = bookmarkRV, bookmarkAt, bookmark
	}
	if fb := c.firstBookmark.Load(); fb != nil {
		cy.FirstBookmarkRV, cy.FirstBookmarkAfter = fb.rv, fb.after
	}
	cy.RelistRV, cy.RelistErr = c.relistQuiet(ctx, true)
	c.cfg.OnCycle(cy)
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
		case !open && time.Since(since) > c.cfg.NotReadyAfter:
			errs = append(errs, fmt.Errorf("%s watcher closed for %s", w.name, time.Since(since).Round(time.Second)))
		}
	}
	return errors.Join(errs...)
}

// Windows are this apiserver's known windows, one per resource: the
// ConfigMaps' and those of Config.Resources.
func (c *Collector) Windows() []Window { return c.m.windows.windows() }

// Unregister removes this Collector's series.
func (c *Collector) Unregister() { c.m.unregister() }

// rvDistance is a - b, subtracted as integers first: RVs as floats are exact
// only below 2^53.
func rvDistance(a, b uint64) float64 {
	if a >= b {
		return float64(a - b)
	}
	return -float64(b - a)
}
