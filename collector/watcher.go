package collector

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"

	"github.com/watchcache/watchcache-exporter/internal/kube"
	"github.com/watchcache/watchcache-exporter/internal/owned"
	"github.com/watchcache/watchcache-exporter/internal/pause"
	"github.com/watchcache/watchcache-exporter/internal/promopts"
	"github.com/watchcache/watchcache-exporter/internal/ratelog"
)

// Names of the two long-lived watchers, the "watcher" label.
const (
	WatcherPlain     = "plain"
	WatcherBookmarks = "bookmarks"
)

// Why a watch ended, the "reason" label of watch_restarts_total.
const (
	endTimeout  = "timeout"  // the server closed it at timeoutSeconds
	endClosed   = "closed"   // closed early, after events or a second
	endShort    = "short"    // closed within a second with no event: a failure
	endDeadline = "deadline" // hung: our own deadline past timeoutSeconds ended it
	endExpired  = "expired"  // 410: must relist
	endError    = "error"    // another ERROR event, or the watch could not open
)

// As client-go's reflector: the backoff between failed watches and relists
// (0.8 s doubling to 30 s, full jitter), reset after 2 minutes without one,
// and a watch that ends within a second with no event counts as failed.
var watchBackoff = wait.Backoff{Duration: 800 * time.Millisecond, Cap: 30 * time.Second, Steps: 38, Factor: 2, Jitter: 1}

const (
	backoffReset   = 2 * time.Minute
	shortWatch     = time.Second
	clientDeadline = 15 * time.Second // past timeoutSeconds: the server should have closed it
	// The apiserver sends a BOOKMARK 2 s before the watch's deadline (and its
	// bookmark timer fires late by up to a second); one that arrives later
	// than this before the client's view of the deadline is that one.
	preTimeoutMargin = 2500 * time.Millisecond
)

// watcher keeps one watch on the quiet ConfigMap open for as long as it runs,
// like an informer's reflector: it reopens a closed watch from its last RV,
// relists (a list selected by name) when that RV is refused with 410, and
// backs off on failures.
type watcher struct {
	name       string
	bookmarks  bool
	client     kube.ConfigMapsGetter
	ns         string
	opts       metav1.ListOptions
	m          *Metrics
	log        logr.Logger
	errLog     *ratelog.Logger
	minTimeout time.Duration
	maxTimeout time.Duration
	// onBookmark receives each BOOKMARK's RV and arrival time, and how long
	// after its watch opened the first of each watch came (0 for others).
	onBookmark func(rv uint64, at time.Time, first time.Duration)
	// onChange receives quiet as each ADDED or MODIFIED event shows it.
	onChange func(*corev1.ConfigMap)
	// relist lists (and if need be creates) quiet and returns the RV to
	// watch from.
	relist func(ctx context.Context) (uint64, error)
	// retryAfter is the pause the last failed request asked for (at most
	// pause.MaxAsked); owned by run.
	retryAfter time.Duration

	events atomic.Uint64 // every event seen, over all its watches

	mu         sync.Mutex
	open       bool
	everOpened bool
	closedAt   time.Time
}

// state says whether the watch is open, whether it has ever been, and since
// when it has been closed.
func (w *watcher) state() (open, everOpened bool, closedSince time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.open, w.everOpened, w.closedAt
}

func (w *watcher) setOpen(open bool) {
	w.mu.Lock()
	w.open = open
	if open {
		w.everOpened = true
	} else {
		w.closedAt = time.Now()
	}
	w.mu.Unlock()
	w.m.watchOpen.WithLabelValues(w.name).Set(map[bool]float64{false: 0, true: 1}[open])
}

// run watches from rv (0: relist first) until ctx ends.
func (w *watcher) run(ctx context.Context, rv uint64) {
	delay := watchBackoff.DelayWithReset(clock.RealClock{}, backoffReset)
	backoff := func(what string) {
		d := max(delay(), w.retryAfter)
		w.retryAfter = 0
		w.errLog.Info("backoff-"+what, "watcher backing off", "watcher", w.name, "after", what, "retryIn", d.Round(time.Millisecond))
		_ = pause.For(ctx, d)
	}
	for ctx.Err() == nil {
		if rv == 0 {
			var err error
			if rv, err = w.relist(ctx); err != nil {
				if ctx.Err() == nil {
					w.retryAfter, _ = pause.Asked(err)
					w.m.apiErrors.WithLabelValues("relist", promopts.Reason(err)).Inc()
					w.errLog.Error("relist-"+promopts.Reason(err), err, "relist failed", "watcher", w.name)
					backoff("relist")
				}
				continue
			}
		}
		var end string
		rv, end = w.watchOnce(ctx, rv)
		if ctx.Err() != nil {
			return
		}
		w.m.watchRestarts.WithLabelValues(w.name, end).Inc()
		switch end {
		case endTimeout, endClosed:
			continue // reopen at once from the last RV
		case endExpired:
			w.m.relists.WithLabelValues(w.name).Inc()
			w.errLog.Info("expired", "resourceVersion refused with 410 Gone; relisting", "watcher", w.name, "resourceVersion", rv)
			rv = 0
		}
		backoff(end)
	}
}

// watchOnce opens a watch from rv and follows it until it ends. It returns
// the RV to reopen from and why the watch ended.
func (w *watcher) watchOnce(ctx context.Context, rv uint64) (uint64, string) {
	// A random timeout between min and max, as client-go's reflector draws
	// one, so that the exporter's watches behave like an informer's.
	timeout := w.minTimeout + rand.N(w.maxTimeout-w.minTimeout+1)
	secs := int64(math.Ceil(timeout.Seconds()))
	opts := w.opts
	opts.ResourceVersion = strconv.FormatUint(rv, 10)
	opts.AllowWatchBookmarks = w.bookmarks
	opts.TimeoutSeconds = &secs
	// A hung connection is not left open forever: our own deadline a little
	// past the server's.
	wctx, cancel := context.WithTimeout(ctx, timeout+clientDeadline)
	defer cancel()
	opened := time.Now()
	wi, err := w.client.ConfigMaps(w.ns).Watch(wctx, opts)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return rv, endClosed
		case isGone(err):
			return rv, endExpired
		}
		w.retryAfter, _ = pause.Asked(err)
		w.m.apiErrors.WithLabelValues("watch", promopts.Reason(err)).Inc()
		w.errLog.Error("open-"+promopts.Reason(err), err, "watch failed to open", "watcher", w.name, "resourceVersion", rv)
		return rv, endError
	}
	defer wi.Stop()
	w.setOpen(true)
	defer w.setOpen(false)
	w.log.V(1).Info("watch open", "watcher", w.name, "resourceVersion", rv, "timeoutSeconds", secs)

	var lastBookmark time.Time
	events := 0
	for {
		var ev watch.Event
		var ok bool
		select {
		case ev, ok = <-wi.ResultChan():
		case <-wctx.Done():
			if ctx.Err() != nil {
				return rv, endClosed
			}
			w.errLog.Info("deadline", "watch still open past its timeoutSeconds: closed it", "watcher", w.name, "timeoutSeconds", secs)
			return rv, endDeadline
		}
		now := time.Now()
		if !ok {
			lasted := now.Sub(opened)
			switch {
			case ctx.Err() != nil:
				return rv, endClosed
			case wctx.Err() != nil:
				return rv, endDeadline
			case lasted >= timeout-time.Second:
				return rv, endTimeout
			case lasted < shortWatch && events == 0:
				w.errLog.Info("short", "watch closed within a second with no event", "watcher", w.name)
				return rv, endShort
			}
			w.errLog.Info("closed", "watch closed early", "watcher", w.name, "after", lasted.Round(time.Millisecond))
			return rv, endClosed
		}
		events++
		w.events.Add(1)
		w.m.watchEvents.WithLabelValues(w.name, string(ev.Type)).Inc()
		if ev.Type == watch.Error {
			err := apierrors.FromObject(ev.Object)
			if isGone(err) {
				return rv, endExpired
			}
			w.m.apiErrors.WithLabelValues("watch", promopts.Reason(err)).Inc()
			w.errLog.Error("event-"+promopts.Reason(err), err, "watch ERROR event", "watcher", w.name)
			return rv, endError
		}
		acc, err := meta.Accessor(ev.Object)
		if err != nil {
			continue
		}
		evRV, err := owned.ParseRV(acc.GetResourceVersion())
		if err != nil {
			w.errLog.Error("rv", err, "event without a numeric resourceVersion", "watcher", w.name, "type", ev.Type)
			continue
		}
		switch ev.Type {
		case watch.Bookmark:
			preTimeout := now.Sub(opened) >= timeout-preTimeoutMargin
			var first time.Duration
			switch {
			case lastBookmark.IsZero():
				first = now.Sub(opened)
				d := first.Seconds()
				w.m.firstBookmark.Observe(d)
				w.m.firstBookmarkLast.Set(d)
				w.log.Info("first BOOKMARK", "watcher", w.name, "seconds", d, "resourceVersion", evRV)
			case preTimeout:
				// Not a period: the apiserver's last word before the
				// deadline.
			default:
				w.m.bookmarkInterval.Observe(now.Sub(lastBookmark).Seconds())
			}
			if preTimeout {
				w.m.pretimeoutBookmarks.Inc()
			}
			lastBookmark = now
			rv = evRV
			w.onBookmark(evRV, now, first)
		case watch.Deleted:
			// Somebody deleted quiet: make it again, at once.
			if !w.bookmarks {
				rv = evRV
			}
			if _, err := w.relist(ctx); err != nil && ctx.Err() == nil {
				w.errLog.Error("recreate", err, "recreating the deleted quiet ConfigMap", "watcher", w.name)
			}
		default:
			// The bookmark watcher reopens from its last BOOKMARK, as the
			// exporter's measurement of bookmarks asks; the plain one from
			// the last event it saw.
			if !w.bookmarks {
				rv = evRV
			}
			if cm, ok := ev.Object.(*corev1.ConfigMap); ok && w.onChange != nil {
				w.onChange(cm)
			}
		}
	}
}
