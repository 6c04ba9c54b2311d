// Package arrivals is a test's own exact count of a resource's writes: a
// watch of every object of the resource that stamps each event as it
// arrives. A test compares the exporter's windows and expiries with counts
// of it instead of with apiserver counters sampled every few seconds, whose
// reads take seconds on a busy machine and whose interpolated rates wobble
// by more than the tolerances checked.
package arrivals

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// Log holds the times at which the watch received each event, in order.
type Log struct {
	t  *testing.T
	mu sync.Mutex
	at []time.Time
	// ended: when the watch's RV was refused (an apiserver restart rebuilds
	// its cache), so that later writes are not counted; endErr says why.
	ended  time.Time
	endErr error
}

// Watch watches every object of r, across all namespaces, from its current
// RV until the test ends, resuming from the last RV it got when the
// apiserver closes the watch, so that it misses no event. Once its RV is
// refused (the apiserver restarted), it counts no more: a Count that reaches
// past then fails the test.
func Watch(t *testing.T, r dynamic.NamespaceableResourceInterface) *Log {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	l, err := r.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, l.GetResourceVersion(), &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return r.Watch(ctx, o) },
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	log := &Log{t: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Added, watch.Modified, watch.Deleted:
				log.mu.Lock()
				log.at = append(log.at, time.Now())
				log.mu.Unlock()
			case watch.Error:
				log.mu.Lock()
				if log.ended.IsZero() {
					log.ended, log.endErr = time.Now(), apierrors.FromObject(ev.Object)
				}
				log.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { cancel(); w.Stop(); <-done })
	return log
}

// ConfigMaps watches every ConfigMap of the cluster that cfg reaches, as
// Watch does: the writes that fill the ConfigMaps' watch cache.
func ConfigMaps(t *testing.T, cfg *rest.Config) *Log {
	t.Helper()
	return Watch(t, dynamic.NewForConfigOrDie(cfg).Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}))
}

// Count is the number of events received in (from, to].
func (l *Log) Count(from, to time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.ended.IsZero() && to.After(l.ended) {
		l.t.Errorf("the test's watch ended at %s (%v): no count up to %s", l.ended.Format(time.TimeOnly), l.endErr, to.Format(time.TimeOnly))
	}
	return l.after(to) - l.after(from)
}

// after is the number of events received up to t.
func (l *Log) after(t time.Time) int {
	i, _ := slices.BinarySearchFunc(l.at, t, func(x, t time.Time) int {
		if x.After(t) {
			return 1
		}
		return -1
	})
	return i
}

// Rate is the events received in the span of seconds that ends at end,
// per second.
func (l *Log) Rate(end time.Time, seconds float64) float64 {
	return float64(l.Count(end.Add(-time.Duration(seconds*float64(time.Second))), end)) / seconds
}
