package compaction

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchcache/watchcache-exporter/internal/pause"
	"github.com/watchcache/watchcache-exporter/internal/promopts"
)

// runLists times a full paginated LIST of the largest resource every
// ListInterval, the first as soon as the object counts name it.
func (h *Horizon) runLists(ctx context.Context) {
	for ctx.Err() == nil {
		r, ok := h.cfg.Objects.Largest()
		if !ok {
			if pause.For(ctx, h.cfg.Interval) != nil {
				return
			}
			continue
		}
		start := time.Now()
		if seconds, pages, ok := h.timeList(ctx, r.Name(), h.serial(h.cfg.Client.Resource(r.GVR()).List)); ok {
			h.mu.Lock()
			h.list = timedList{r: r, seconds: seconds, pages: pages, done: true}
			h.mu.Unlock()
		}
		if pause.For(ctx, time.Until(start.Add(h.cfg.ListInterval))) != nil {
			return
		}
	}
}

// timeList lists every page of list, PageSize at a time, as a client that
// relists does, and says how long that took; ok is false when a page failed.
func (h *Horizon) timeList(ctx context.Context, name string, list lister) (seconds float64, pages int, ok bool) {
	start := time.Now()
	opts := metav1.ListOptions{Limit: PageSize}
	for pages = 1; ; pages++ {
		l, err := list(ctx, opts)
		if err != nil {
			if ctx.Err() == nil {
				h.errors.WithLabelValues(promopts.Reason(err)).Inc()
				h.errLog.Error("list-"+name, err, "the timed paginated LIST failed", "resource", name, "page", pages, "after", time.Since(start).Round(time.Millisecond))
			}
			return 0, 0, false
		}
		if l.Continue == "" {
			seconds = time.Since(start).Seconds()
			h.log.V(1).Info("timed a paginated LIST", "resource", name, "pages", pages, "seconds", seconds)
			return seconds, pages, true
		}
		opts.Continue = l.Continue
	}
}
