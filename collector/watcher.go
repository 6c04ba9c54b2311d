package collector

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/watchcache/watchcache-exporter/internal/owned"
)

// Names of the two long-lived watchers, the "watcher" label.
const (
	WatcherPlain     = "plain"
	WatcherBookmarks = "bookmarks"
)

// Why a watch ended, the "reason" label of watch_restarts_total.
const (
	endTimeout = "timeout" // the server closed it at timeoutSeconds
	endClosed  = "closed"  // closed early: apiserver restart, network
	endExpired = "expired" // ERROR 410: must relist
	endError   = "error"   // another ERROR event, or the watch could not open
)

// watcher keeps one watch on the quiet ConfigMap open for as long as it runs,
// like an informer's reflector: it reopens a closed watch from its last RV,
// relists (a get, since the watch selects one object) when that RV is
// refused with 410, and backs off on errors.
type watcher struct {
	name       string
	bookmarks  bool
	client     kubernetes.Interface
	ns, quiet  string
	m          *Metrics
	log        logr.Logger
	now        func() time.Time
	minTimeout time.Duration
	maxTimeout time.Duration
	// onBookmark receives each BOOKMARK's RV and arrival time.
	onBookmark func(rv uint64, at time.Time)
	// relist lists (and if need be creates) quiet and returns the RV to
	// watch from.
	relist func(ctx context.Context) (uint64, error)

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
		w.closedAt = w.now()
	}
	w.mu.Unlock()
	v := 0.0
	if open {
		v = 1
	}
	w.m.watchOpen.WithLabelValues(w.name).Set(v)
}

// run watches from rv (0: relist first) until ctx ends.
func (w *watcher) run(ctx context.Context, rv uint64) {
	backoff := newBackoff(time.Second, 30*time.Second)
	relisted := false // rv comes from a relist just now
	for ctx.Err() == nil {
		if rv == 0 {
			var err error
			if rv, err = w.relist(ctx); err != nil {
				w.m.apiErrors.WithLabelValues("relist", reason(err)).Inc()
				w.log.Error(err, "relist failed; retrying", "watcher", w.name, "retryIn", backoff.peek())
				backoff.sleep(ctx)
				continue
			}
			relisted = true
		}
		var end string
		rv, end = w.watchOnce(ctx, rv)
		if ctx.Err() != nil {
			return
		}
		w.m.watchRestarts.WithLabelValues(w.name, end).Inc()
		switch end {
		case endExpired:
			w.m.relists.WithLabelValues(w.name).Inc()
			w.log.Info("resourceVersion refused with 410 Gone; relisting", "watcher", w.name, "resourceVersion", rv)
			if relisted {
				// Refused straight after a relist: the apiserver is not
				// settled (a cache being rebuilt); do not hammer it.
				backoff.sleep(ctx)
			}
			rv = 0
		case endError:
			backoff.sleep(ctx)
		default:
			backoff.reset()
			relisted = false
		}
	}
}

// watchOnce opens a watch from rv and follows it until it ends. It returns
// the RV to reopen from and why the watch ended.
func (w *watcher) watchOnce(ctx context.Context, rv uint64) (uint64, string) {
	// A random timeout between min and max, as client-go's reflector draws
	// one, so that the exporter's watches behave like an informer's.
	timeout := w.minTimeout + rand.N(w.maxTimeout-w.minTimeout+1)
	secs := int64(timeout / time.Second)
	opened := w.now()
	wi, err := w.client.CoreV1().ConfigMaps(w.ns).Watch(ctx, metav1.ListOptions{
		ResourceVersion:     strconv.FormatUint(rv, 10),
		FieldSelector:       fields.OneTermEqualSelector("metadata.name", w.quiet).String(),
		AllowWatchBookmarks: w.bookmarks,
		TimeoutSeconds:      &secs,
	})
	if err != nil {
		if ctx.Err() != nil {
			return rv, endClosed
		}
		if isGone(err) {
			return rv, endExpired
		}
		w.m.apiErrors.WithLabelValues("watch", reason(err)).Inc()
		w.log.Error(err, "watch failed to open", "watcher", w.name, "resourceVersion", rv)
		return rv, endError
	}
	defer wi.Stop()
	w.setOpen(true)
	defer w.setOpen(false)
	w.log.V(1).Info("watch open", "watcher", w.name, "resourceVersion", rv, "timeoutSeconds", secs)

	var lastBookmark time.Time
	for {
		var ev watch.Event
		var ok bool
		select {
		case ev, ok = <-wi.ResultChan():
		case <-ctx.Done():
			return rv, endClosed
		}
		if !ok {
			if w.now().Sub(opened) >= timeout-time.Second {
				return rv, endTimeout
			}
			w.log.Info("watch closed early", "watcher", w.name, "after", w.now().Sub(opened).Round(time.Millisecond))
			return rv, endClosed
		}
		now := w.now()
		w.m.watchEvents.WithLabelValues(w.name, string(ev.Type)).Inc()
		if ev.Type == watch.Error {
			err := apierrors.FromObject(ev.Object)
			if isGone(err) {
				return rv, endExpired
			}
			w.m.apiErrors.WithLabelValues("watch", reason(err)).Inc()
			w.log.Error(err, "watch ERROR event", "watcher", w.name)
			return rv, endError
		}
		acc, err := meta.Accessor(ev.Object)
		if err != nil {
			continue
		}
		evRV, err := owned.ParseRV(acc.GetResourceVersion())
		if err != nil {
			w.log.Error(err, "event without a numeric resourceVersion", "watcher", w.name, "type", ev.Type)
			continue
		}
		switch ev.Type {
		case watch.Bookmark:
			if lastBookmark.IsZero() {
				d := now.Sub(opened).Seconds()
				w.m.firstBookmark.Observe(d)
				w.m.firstBookmarkLast.Set(d)
				w.log.Info("first BOOKMARK", "watcher", w.name, "seconds", d, "resourceVersion", evRV)
			} else {
				w.m.bookmarkInterval.Observe(now.Sub(lastBookmark).Seconds())
			}
			lastBookmark = now
			rv = evRV
			w.onBookmark(evRV, now)
		case watch.Deleted:
			// Somebody deleted quiet: make it again, at once.
			if !w.bookmarks {
				rv = evRV
			}
			if _, err := w.relist(ctx); err != nil {
				w.log.Error(err, "recreating the deleted quiet ConfigMap", "watcher", w.name)
			}
		default:
			// The bookmark watcher reopens from its last BOOKMARK, as the
			// exporter's measurement of bookmarks asks; the plain one from
			// the last event it saw.
			if !w.bookmarks {
				rv = evRV
			}
		}
	}
}

func isGone(err error) bool {
	var st apierrors.APIStatus
	return errors.As(err, &st) && st.Status().Code == http.StatusGone
}

// reason is the Kubernetes status reason of err, for the "reason" label.
func reason(err error) string {
	if r := apierrors.ReasonForError(err); r != metav1.StatusReasonUnknown {
		return string(r)
	}
	return "Unknown"
}

// backoff doubles a delay from min to max; reset starts again.
type backoff struct {
	min, max, cur time.Duration
}

func newBackoff(min, max time.Duration) *backoff { return &backoff{min: min, max: max, cur: min} }

func (b *backoff) peek() time.Duration { return b.cur }
func (b *backoff) reset()              { b.cur = b.min }

func (b *backoff) sleep(ctx context.Context) {
	t := time.NewTimer(b.cur)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	b.cur = min(2*b.cur, b.max)
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
