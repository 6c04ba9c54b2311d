package collector_test

// Hermetic tests of the measurement's logic: client-go's fake clientset
// dressed as a watch cache (test/fakecache) in a testing/synctest bubble,
// so that minutes of probes, watches and backoffs run in milliseconds of
// wall time. synctest.Test also proves that every goroutine the collector
// starts ends with its context. The numbers themselves are checked against
// the real apiserver (daemon's tests).

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/watchcache/watchcache-exporter/collector"
	"github.com/watchcache/watchcache-exporter/internal/owned"
	"github.com/watchcache/watchcache-exporter/rvclock"
	"github.com/watchcache/watchcache-exporter/test/fakecache"
	"github.com/watchcache/watchcache-exporter/test/typed"
)

const quiet = "quiet"

// run is a collector against srv, with a writer of others' writes at
// loadEvery (0: none) that the exporter sees as its own (as its load
// writer's), until stop.
type run struct {
	srv  *fakecache.Server
	reg  *prometheus.Registry
	hist *rvclock.History
	stop func()
}

func start(t *testing.T, srv *fakecache.Server, cfg collector.Config, loadEvery time.Duration) *run {
	t.Helper()
	cfg.Namespace, cfg.QuietName = "ns", quiet
	if cfg.ProbeInterval == 0 {
		cfg.ProbeInterval = time.Second
	}
	if cfg.WatchTimeoutMin == 0 {
		cfg.WatchTimeoutMin, cfg.WatchTimeoutMax = time.Hour, time.Hour
	}
	r := &run{srv: srv, reg: prometheus.NewRegistry(), hist: rvclock.NewHistory(1 << 12)}
	c, err := collector.New(cfg, typed.Core(srv.CoreV1()), owned.NewStore("ns", quiet, r.reg, logr.Discard(), time.Now), r.hist, func() float64 { return 10 }, r.reg, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { c.Run(ctx) })
	if loadEvery > 0 {
		wg.Go(func() {
			tick := time.NewTicker(loadEvery)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					r.hist.ObserveWrite(srv.Write(1), time.Now())
				}
			}
		})
	}
	r.stop = func() { cancel(); wg.Wait() }
	return r
}

func (r *run) value(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m, labels[i], labels[i+1]) {
					continue next
				}
			}
			switch {
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == k {
			return l.GetValue() == v
		}
	}
	return false
}

func compare(t *testing.T, r *run, want string, names ...string) {
	t.Helper()
	if err := testutil.GatherAndCompare(r.reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

// Each way a long-lived watch can end, as the plain watcher counts it.
func TestWatchEnds(t *testing.T) {
	for _, tc := range []struct {
		name     string
		closeAt  time.Duration // -1: never
		reason   string
		min, max float64
	}{
		// The server closes it at timeoutSeconds (60 s): 3 in 195 s.
		{"timeout", 60 * time.Second, "timeout", 3, 3},
		// Closed after 10 s: reopened at once, 19 in 195 s.
		{"closed early", 10 * time.Second, "closed", 19, 19},
		// Closed at once with no event: a failure with backoff (0.8 s
		// doubling to 30 s, jittered), not a busy loop.
		{"short", 0, "short", 5, 16},
		// Never closed: our own deadline 15 s past timeoutSeconds ends it,
		// at 75 s and about 151 s.
		{"hung", -1, "deadline", 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := fakecache.New(100)
				srv.OnWatch = func(w *fakecache.Watch) {
					switch {
					case w.Opts.AllowWatchBookmarks || tc.closeAt < 0:
					case tc.closeAt == 0:
						w.Stop()
					default:
						time.AfterFunc(tc.closeAt, w.Stop)
					}
				}
				r := start(t, srv, collector.Config{WatchTimeoutMin: time.Minute, WatchTimeoutMax: time.Minute}, 0)
				time.Sleep(195 * time.Second)
				got := r.value(t, "watchcache_watch_restarts_total", "watcher", "plain", "reason", tc.reason)
				r.stop()
				if got < tc.min || got > tc.max {
					t.Errorf("watch_restarts_total{watcher=plain,reason=%s} = %v in 195 s, want %v..%v", tc.reason, got, tc.min, tc.max)
				}
			})
		})
	}
}

// A watch reopened from an RV the cache no longer holds is refused with 410;
// the watcher relists and watches from the list's RV.
func TestReopenExpiredThenRelist(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := fakecache.New(100)
		srv.OnWatch = func(w *fakecache.Watch) { time.AfterFunc(time.Minute, w.Stop) }
		r := start(t, srv, collector.Config{WatchTimeoutMin: time.Minute, WatchTimeoutMax: time.Minute}, 0)
		time.Sleep(30 * time.Second)
		srv.Write(1000)
		srv.Restart() // both watchers' RVs are gone
		time.Sleep(45 * time.Second)
		first := srv.Last(false)
		r.stop()
		compare(t, r, `
# HELP watchcache_relists_total Times a long-lived watcher had to relist because its resourceVersion was refused with 410 Gone.
# TYPE watchcache_relists_total counter
watchcache_relists_total{watcher="bookmarks"} 1
watchcache_relists_total{watcher="plain"} 1
`, "watchcache_relists_total")
		if got := r.value(t, "watchcache_watch_restarts_total", "watcher", "plain", "reason", "expired"); got != 1 {
			t.Errorf("restarts of the plain watcher for 410: %v, want 1", got)
		}
		if first == nil || first.Opts.ResourceVersion < "1100" {
			t.Errorf("the watch after the relist is from %v, want the list's RV (1100 or more)", first.Opts.ResourceVersion)
		}
	})
}

// Somebody deletes quiet under the watchers: it is created again at once and
// the watches go on.
func TestQuietDeletedMidWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := fakecache.New(100)
		r := start(t, srv, collector.Config{}, 0)
		time.Sleep(5 * time.Second)
		srv.Delete(quiet)
		time.Sleep(2 * time.Second)
		exists := srv.Exists(quiet)
		r.stop()
		if !exists {
			t.Error("quiet not created again")
		}
		compare(t, r, `
# HELP watchcache_quiet_recreations_total Times the quiet ConfigMap was found deleted and created again.
# TYPE watchcache_quiet_recreations_total counter
watchcache_quiet_recreations_total 1
`, "watchcache_quiet_recreations_total")
		if got := r.value(t, "watchcache_watch_events_total", "watcher", "plain", "type", "DELETED"); got != 1 {
			t.Errorf("plain watcher saw %v DELETED events, want 1", got)
		}
	})
}

// The window gauges follow the probes: a value while they answer, NaN after
// 3 failed intervals, a value again when they answer again; the success
// timestamp stays at the last answer meanwhile.
func TestWindowGoesNaNWhenProbesFail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := fakecache.New(100)
		srv.Capacity = 100 // 10 s of history at 10 writes/s
		r := start(t, srv, collector.Config{}, 100*time.Millisecond)
		window := func() float64 { return r.value(t, "watchcache_window_seconds") }
		time.Sleep(20500 * time.Millisecond)
		if w := window(); math.Abs(w-10) > 0.5 {
			t.Errorf("window %v s at 10 writes/s with 100 RVs of history, want about 10", w)
		}
		lastOK := r.value(t, "watchcache_last_probe_success_timestamp_seconds")
		srv.Lock()
		srv.ProbeErr = func(string) error { return errors.New("connection refused") }
		srv.Unlock()
		time.Sleep(2 * time.Second)
		if w := window(); math.IsNaN(w) {
			t.Error("window NaN after 2 failed intervals, want the last value kept")
		}
		time.Sleep(2 * time.Second)
		if w := window(); !math.IsNaN(w) {
			t.Errorf("window %v after 4 failed intervals, want NaN", w)
		}
		if got := r.value(t, "watchcache_last_probe_success_timestamp_seconds"); got != lastOK {
			t.Errorf("last success timestamp moved from %v to %v while every probe failed", lastOK, got)
		}
		srv.Lock()
		srv.ProbeErr = nil
		srv.Unlock()
		time.Sleep(2 * time.Second)
		w := window()
		now := r.value(t, "watchcache_last_probe_success_timestamp_seconds")
		r.stop()
		if math.IsNaN(w) {
			t.Error("window still NaN after the probes answer again")
		}
		if now <= lastOK+4 {
			t.Errorf("last success timestamp %v, want past %v once the probes answer again", now, lastOK+4)
		}
	})
}

// A cycle ends at the stale RV's first 410, labelled by what the reconnect
// from the latest BOOKMARK said at that moment.
func TestCycleEndsByBookmarkResult(t *testing.T) {
	for _, tc := range []struct {
		result   string
		bookmark uint64 // RV the bookmark watcher is sent (0: none)
		probeErr string // RV whose probes fail
	}{
		{"none", 0, ""},
		{"ok", 1e9, ""},    // a fresh RV (the fake serves every RV past O)
		{"expired", 1, ""}, // older than the cache
		{"error", 1e9, "1000000000"},
	} {
		t.Run(tc.result, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := fakecache.New(100)
				srv.Capacity = 100
				if tc.probeErr != "" {
					srv.ProbeErr = func(rv string) error {
						if rv == tc.probeErr {
							return errors.New("boom")
						}
						return nil
					}
				}
				if tc.bookmark != 0 {
					srv.OnWatch = func(w *fakecache.Watch) {
						if w.Opts.AllowWatchBookmarks {
							bm := srv.BookmarkAt(tc.bookmark)
							time.AfterFunc(2*time.Second, func() { w.Action("BOOKMARK", bm) })
						}
					}
				}
				r := start(t, srv, collector.Config{}, 100*time.Millisecond)
				time.Sleep(15 * time.Second)
				r.stop()
				if got := r.value(t, "watchcache_expiry_cycles_total", "bookmark_result", tc.result); got != 1 {
					t.Errorf("cycles with bookmark_result=%s: %v after 15 s at a 10 s window, want 1", tc.result, got)
				}
				if e := r.value(t, "watchcache_expiry_last_seconds"); math.Abs(e-10) > 1.1 {
					t.Errorf("time to first 410 %v s, want about 10", e)
				}
			})
		})
	}
}

// An apiserver restart makes the stale RV refused at once: that is a cache
// reset, not an expiry. It is counted as one, kept out of the expiry
// histogram and cycles, and the prediction starts again; the next cycle is a
// normal one.
func TestCacheResetIsNotAnExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := fakecache.New(100)
		srv.Capacity = 100
		r := start(t, srv, collector.Config{}, 100*time.Millisecond)
		time.Sleep(5500 * time.Millisecond)
		predictedBefore := r.value(t, "watchcache_predicted_capacity_events")
		srv.Restart()
		time.Sleep(time.Second)
		compare(t, r, `
# HELP watchcache_cache_resets_total Times this apiserver's watch cache was rebuilt (its restart, or a relist of its own): its oldest resourceVersion jumped past every write known at the previous probe.
# TYPE watchcache_cache_resets_total counter
watchcache_cache_resets_total 1
`, "watchcache_cache_resets_total")
		if n := r.value(t, "watchcache_expiry_seconds"); n != 0 {
			t.Errorf("%v expiries observed at the reset, want 0", n)
		}
		if got := r.value(t, "watchcache_predicted_capacity_events"); got >= predictedBefore && predictedBefore > 100 {
			t.Errorf("predicted capacity %v after the reset, want it started again below %v", got, predictedBefore)
		}
		time.Sleep(15 * time.Second)
		r.stop()
		if n := r.value(t, "watchcache_expiry_seconds"); n != 1 {
			t.Errorf("%v expiries 15 s after the reset, want the next cycle's 1", n)
		}
		if e := r.value(t, "watchcache_expiry_last_seconds"); math.Abs(e-10) > 1.1 {
			t.Errorf("the cycle after the reset expired after %v s, want about 10", e)
		}
		if n := r.value(t, "watchcache_cache_resets_total"); n != 1 {
			t.Errorf("%v resets, want 1: the cache's normal progress is not a reset", n)
		}
	})
}

// Bookmarks at 60 s and 120 s of a 180 s watch, and the one the apiserver
// sends 2 s before its deadline: one interval of 60 s, the last one apart.
func TestPreTimeoutBookmark(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := fakecache.New(100)
		srv.OnWatch = func(w *fakecache.Watch) {
			if !w.Opts.AllowWatchBookmarks {
				return
			}
			for _, at := range []time.Duration{60 * time.Second, 120 * time.Second, 178 * time.Second} {
				time.AfterFunc(at, func() { w.Action("BOOKMARK", srv.Bookmark()) })
			}
			time.AfterFunc(180*time.Second, w.Stop)
		}
		r := start(t, srv, collector.Config{WatchTimeoutMin: 180 * time.Second, WatchTimeoutMax: 180 * time.Second}, 0)
		time.Sleep(200 * time.Second)
		r.stop()
		compare(t, r, `
# HELP watchcache_pretimeout_bookmarks_total BOOKMARKs the apiserver sent about 2 s before a watch's timeoutSeconds (left out of watchcache_bookmark_interval_seconds).
# TYPE watchcache_pretimeout_bookmarks_total counter
watchcache_pretimeout_bookmarks_total 1
# HELP watchcache_first_bookmark_last_seconds The last observation of watchcache_first_bookmark_seconds.
# TYPE watchcache_first_bookmark_last_seconds gauge
watchcache_first_bookmark_last_seconds 60
`, "watchcache_pretimeout_bookmarks_total", "watchcache_first_bookmark_last_seconds")
		if n := r.value(t, "watchcache_bookmark_interval_seconds"); n != 1 {
			t.Errorf("%v bookmark intervals observed, want 1 (120 s - 60 s; the pre-timeout one left out)", n)
		}
	})
}

// A quiet ConfigMap whose marks somebody removed is watched and probed but
// never touched: no new cycle starts, the object keeps their resourceVersion,
// watchcache_exporter_objects_lost says so; with the marks back, the touches resume.
func TestQuietTakenIsNotTouched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := fakecache.New(100)
		srv.Capacity = 20 // 2 s of history at 10 writes/s: short cycles
		r := start(t, srv, collector.Config{}, 100*time.Millisecond)
		time.Sleep(10 * time.Second)
		if r.value(t, "watchcache_quiet_touches_total") < 2 {
			t.Fatal("fewer than 2 cycles in 10 s")
		}
		cm := srv.Get(quiet)
		marks := cm.DeepCopy()
		delete(cm.Annotations, owned.OwnerAnnotation)
		cm.Data = map[string]string{"theirs": "yes"}
		srv.Put(cm)
		taken := srv.Get(quiet)
		time.Sleep(5 * time.Second) // any cycle running ends
		touches := r.value(t, "watchcache_quiet_touches_total")
		time.Sleep(10 * time.Second)
		if got := srv.Get(quiet); got.ResourceVersion != taken.ResourceVersion {
			t.Errorf("their quiet was written: RV %s -> %s, data %v", taken.ResourceVersion, got.ResourceVersion, got.Data)
		}
		if got := r.value(t, "watchcache_quiet_touches_total"); got != touches {
			t.Errorf("touches %v -> %v while quiet was not the exporter's", touches, got)
		}
		if got := r.value(t, "watchcache_exporter_objects_lost"); got != 1 {
			t.Errorf("watchcache_exporter_objects_lost = %v, want 1", got)
		}
		if w := r.value(t, "watchcache_window_seconds"); math.IsNaN(w) {
			t.Error("window NaN: the window probe stopped with the touches")
		}
		marks.ResourceVersion = ""
		srv.Put(marks)
		time.Sleep(5 * time.Second)
		after := r.value(t, "watchcache_quiet_touches_total")
		lost := r.value(t, "watchcache_exporter_objects_lost")
		r.stop()
		if after <= touches || lost != 0 {
			t.Errorf("with the marks back: touches %v -> %v, lost %v; want touches resumed and 0 lost", touches, after, lost)
		}
	})
}

// A probe answered 429 with Retry-After 5 s (API Priority and Fairness, or a
// cache that is initialising) is counted as TooManyRequests, and the probes
// pause for the 5 s asked instead of asking again every interval.
func TestProbesPauseAsAsked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := fakecache.New(100)
		r := start(t, srv, collector.Config{}, 100*time.Millisecond)
		time.Sleep(3500 * time.Millisecond)
		windowProbes := 0
		srv.Lock()
		srv.ProbeErr = func(rv string) error {
			if rv == "1" { // the window probe's far-too-old RV
				windowProbes++
			}
			return apierrors.NewTooManyRequests("Too many requests, please try again later.", 5)
		}
		srv.Unlock()
		time.Sleep(12 * time.Second)
		srv.Lock()
		n := windowProbes
		srv.Unlock()
		throttled := r.value(t, "watchcache_exporter_api_errors_total", "operation", "probe", "reason", "TooManyRequests")
		r.stop()
		if n < 2 || n > 3 {
			t.Errorf("%d window probes in 12 s of 429s asking for 5 s, want 3 (at 0, 5 and 10 s), not one a second", n)
		}
		if throttled < float64(n) {
			t.Errorf("%v probe errors counted as TooManyRequests, want at least %d", throttled, n)
		}
	})
}

// An outage of the probes longer than the window: the cache drops every
// write known before it by itself, so that its oldest RV past them is no
// evidence of a reset. The cycle whose 410 came in the outage is discarded,
// not stamped at the first answer after it.
func TestOutageLongerThanTheWindowIsNotAReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := fakecache.New(100)
		srv.Capacity = 100 // 10 s of history at 10 writes/s
		r := start(t, srv, collector.Config{}, 100*time.Millisecond)
		time.Sleep(5500 * time.Millisecond)
		srv.Lock()
		srv.ProbeErr = func(string) error { return errors.New("i/o timeout") }
		srv.Unlock()
		time.Sleep(30 * time.Second) // the first cycle's 410 is due at about 10 s
		srv.Lock()
		srv.ProbeErr = nil
		srv.Unlock()
		time.Sleep(2 * time.Second)
		compare(t, r, `
# HELP watchcache_cache_resets_total Times this apiserver's watch cache was rebuilt (its restart, or a relist of its own): its oldest resourceVersion jumped past every write known at the previous probe.
# TYPE watchcache_cache_resets_total counter
watchcache_cache_resets_total 0
`, "watchcache_cache_resets_total")
		if n := r.value(t, "watchcache_cache_resets_unknown_total"); n != 1 {
			t.Errorf("%v unknowable resets counted after a 30 s outage of a 10 s window, want 1", n)
		}
		if n := r.value(t, "watchcache_expiry_cycles_discarded_total", "reason", "probe_gap"); n != 1 {
			t.Errorf("%v cycles discarded for the gap, want the one whose 410 came in it", n)
		}
		if n := r.value(t, "watchcache_expiry_seconds"); n != 0 {
			t.Errorf("%v expiries observed across the outage, want 0", n)
		}
		if w := r.value(t, "watchcache_window_seconds"); math.Abs(w-10) > 0.5 {
			t.Errorf("window %v s after the outage, want about 10", w)
		}
		time.Sleep(12 * time.Second)
		r.stop()
		if n := r.value(t, "watchcache_expiry_seconds"); n != 1 {
			t.Errorf("%v expiries 12 s after the outage, want the next cycle's 1", n)
		}
		if e := r.value(t, "watchcache_expiry_last_seconds"); math.Abs(e-10) > 1.1 {
			t.Errorf("the cycle after the outage expired after %v s, want about 10", e)
		}
	})
}

// An outage shorter than the window that spans a cycle's 410: no reset, and
// the cycle is discarded, not given an expiry up to the outage's length late.
func TestOutageAcrossTheRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := fakecache.New(100)
		srv.Capacity = 100
		r := start(t, srv, collector.Config{}, 100*time.Millisecond)
		time.Sleep(7500 * time.Millisecond)
		srv.Lock()
		srv.ProbeErr = func(string) error { return errors.New("i/o timeout") }
		srv.Unlock()
		time.Sleep(5 * time.Second) // the 410 is due at about 10 s
		srv.Lock()
		srv.ProbeErr = nil
		srv.Unlock()
		time.Sleep(1500 * time.Millisecond)
		if n := r.value(t, "watchcache_expiry_seconds"); n != 0 {
			t.Errorf("%v expiries observed (the last %v s) for a 410 that came in a 5 s outage, want it discarded", n, r.value(t, "watchcache_expiry_last_seconds"))
		}
		if n := r.value(t, "watchcache_expiry_cycles_discarded_total", "reason", "probe_gap"); n != 1 {
			t.Errorf("%v cycles discarded for the gap, want 1", n)
		}
		r.stop()
		for _, name := range []string{"watchcache_cache_resets_total", "watchcache_cache_resets_unknown_total"} {
			if n := r.value(t, name); n != 0 {
				t.Errorf("%s %v after a 5 s outage of a 10 s window, want 0", name, n)
			}
		}
	})
}

// A Retry-After longer than a minute is capped, counted and logged; while
// paused, the window goes stale as in an outage.
func TestLongRetryAfterIsCapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := fakecache.New(100)
		srv.Capacity = 100
		r := start(t, srv, collector.Config{}, 100*time.Millisecond)
		time.Sleep(3500 * time.Millisecond)
		srv.Lock()
		srv.ProbeErr = func(string) error {
			return apierrors.NewTooManyRequests("Too many requests, please try again later.", 3600)
		}
		srv.Unlock()
		time.Sleep(1500 * time.Millisecond)
		srv.Lock()
		srv.ProbeErr = nil
		srv.Unlock()
		time.Sleep(4 * time.Second)
		if w := r.value(t, "watchcache_window_seconds"); !math.IsNaN(w) {
			t.Errorf("window %v s 4 s into a pause, want NaN as after 3 failed probe intervals", w)
		}
		if n := r.value(t, "watchcache_probe_pauses_total", "capped", "true"); n < 1 {
			t.Errorf("%v capped pauses counted for a Retry-After of an hour, want at least 1", n)
		}
		time.Sleep(60 * time.Second)
		r.stop()
		if w := r.value(t, "watchcache_window_seconds"); math.Abs(w-10) > 0.5 {
			t.Errorf("window %v s 65 s after a Retry-After of an hour, want about 10: the pause is capped at 60 s", w)
		}
	})
}
