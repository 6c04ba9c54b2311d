package collector

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/watchcache/watchcache-exporter/resources"
	"github.com/watchcache/watchcache-exporter/rvclock"
)

func TestWindowSeconds(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	clk := rvclock.NewClock(10, 0)
	clk.Observe(100, t0)
	clk.Observe(200, t0.Add(10*time.Second))
	at := t0.Add(20 * time.Second)
	for _, tc := range []struct {
		oldest         uint64
		seconds, lower float64
	}{
		{149, 15, 0}, // RV 150 written at t0+5s
		{99, 20, 0},  // RV 100, the clock's oldest
		{50, 20, 1},  // older than the clock: at least its age
		{1, 20, 1},
		{200, math.NaN(), math.NaN()}, // newer than anything known
	} {
		s, l := windowSeconds(clk, tc.oldest, at)
		if !same(s, tc.seconds) || !same(l, tc.lower) {
			t.Errorf("windowSeconds(oldest %d) = %v, lower %v; want %v, %v", tc.oldest, s, l, tc.seconds, tc.lower)
		}
	}
	if s, l := windowSeconds(rvclock.NewClock(10, 0), 5, at); !math.IsNaN(s) || !math.IsNaN(l) {
		t.Errorf("empty clock: %v, %v; want NaN", s, l)
	}
}

func same(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }

// etcdLike answers watches as etcd does for a resource whose cache is off:
// from an RV below compacted-1 with its compaction error, else nothing.
type etcdLike struct {
	compacted uint64 // smallest RV served
	watches   int
}

func (e *etcdLike) watch(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	e.watches++
	rv, err := strconv.ParseUint(opts.ResourceVersion, 10, 64)
	if err != nil {
		return nil, err
	}
	w := watch.NewFakeWithChanSize(1, false)
	if rv < e.compacted {
		w.Error(&apierrors.NewResourceExpired(etcdCompacted).ErrStatus)
	}
	return w, nil
}

// The bisection finds etcd's oldest revision in about log2(RVs) probes,
// keeps it with one probe while it holds, and finds the next after a
// compaction.
func TestSearchEtcd(t *testing.T) {
	hist := rvclock.NewHistory(10)
	hist.Observe(5000, time.Now())
	e := &etcdLike{compacted: 1234}
	w := &resourceWindows{hist: hist, log: logr.Discard(), etcdOldest: map[*rvclock.Clock]uint64{},
		m: resourceMetrics{searchProbes: promauto.With(prometheus.NewRegistry()).NewCounter(prometheus.CounterOpts{Name: "x"})}}
	p := NewWatchProber(e.watch, metav1.ListOptions{}, time.Millisecond)
	ctx := t.Context()

	w.searchEtcd(ctx, p, hist.Clock)
	if w.etcdOldest[hist.Clock] != 1234 || e.watches > 15 {
		t.Errorf("first search: oldest %d in %d watches, want 1234 in at most 15 (log2 5000 + 1)", w.etcdOldest[hist.Clock], e.watches)
	}
	e.watches = 0
	w.searchEtcd(ctx, p, hist.Clock)
	if w.etcdOldest[hist.Clock] != 1234 || e.watches != 1 {
		t.Errorf("no compaction since: oldest %d in %d watches, want 1234 in 1", w.etcdOldest[hist.Clock], e.watches)
	}
	e.compacted = 4321
	w.searchEtcd(ctx, p, hist.Clock)
	if w.etcdOldest[hist.Clock] != 4321 {
		t.Errorf("after a compaction: oldest %d, want 4321", w.etcdOldest[hist.Clock])
	}
	// A clock that lags etcd's compaction gives no answer rather than a
	// wrong one.
	e.compacted = 6000
	w.searchEtcd(ctx, p, hist.Clock)
	if w.etcdOldest[hist.Clock] != 0 {
		t.Errorf("compaction past the newest RV known: oldest %d, want 0 (unknown)", w.etcdOldest[hist.Clock])
	}
}

// record reports each kind of answer: the cache's O, RV 1 served, etcd's
// compaction, and an error that only turns the gauges to NaN after
// StaleAfter intervals.
func TestRecordResourceWindow(t *testing.T) {
	reg := prometheus.NewRegistry()
	hist := rvclock.NewHistory(10)
	now := time.Now()
	hist.Observe(1000, now.Add(-100*time.Second))
	pods := resources.Resource{Version: "v1", Resource: "pods"}
	w := newResourceWindows(ResourcesConfig{Resources: resources.Fixed(nil), Pace: resources.Pace{Interval: time.Second}, StaleAfter: 3,
		Client: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())},
		newWindowVecs(testTables(reg)), hist, reg, testTables(reg), logr.Discard())
	w.follow([]resources.Resource{pods})
	p := w.probed[pods.Key()]
	win, per := w.m.windows.table, w.m.perResource
	get := func(t *gaugeTable, col int) float64 { return t.value("", "pods", col) }
	w.record(p, pods, ProbeResult{Outcome: Expired, Refusal: Refusal{Source: SourceWatchCache, Oldest: 1499}, Answered: now})
	if s := get(win, windowSecondsCol); !math.IsNaN(s) {
		t.Errorf("before the first object count says which etcd holds pods: window %v, want NaN", s)
	}
	hist.Place("pods", 2000, now, true)
	w.record(p, pods, ProbeResult{Outcome: Expired, Refusal: Refusal{Source: SourceWatchCache, Oldest: 1499}, Answered: now})
	if s, en := get(win, windowSecondsCol), get(per, cacheOnCol); math.Abs(s-50) > 0.01 || en != 1 {
		t.Errorf("cache's O 1499: window %v, cache enabled %v; want 50 s (RV 1500 written 50 s ago), 1", s, en)
	}
	if n := get(win, windowRVsCol); n != 501 {
		t.Errorf("window RVs %v, want 2000-1499", n)
	}
	// The same window, as a value for the fleet's.
	if ws := w.m.windows.windows(); len(ws) != 1 || ws[0].Resource != "pods" || ws[0].Oldest != 1499 || math.Abs(ws[0].Seconds-50) > 0.01 || ws[0].LowerBound {
		t.Errorf("windows() = %+v, want pods' 1499, 50 s, exact", ws)
	}
	w.record(p, pods, ProbeResult{Outcome: OK, Answered: now})
	if ws := w.m.windows.windows(); len(ws) != 1 || ws[0].Oldest != 1 || !ws[0].LowerBound {
		t.Errorf("windows() = %+v, want pods' 1, a lower bound", ws)
	}
	if s, l, o := get(win, windowSecondsCol), get(win, lowerCol), get(win, oldestCol); math.Abs(s-100) > 0.01 || l != 1 || o != 1 {
		t.Errorf("RV 1 served: window %v, lower bound %v, oldest %v; want at least 100 s, 1, 1", s, l, o)
	}
	w.etcdOldest[hist.Clock] = 1999
	w.record(p, pods, ProbeResult{Outcome: Expired, Refusal: Refusal{Source: SourceEtcd}, Answered: now})
	if en, o := get(per, cacheOnCol), get(win, oldestCol); en != 0 || o != 1999 {
		t.Errorf("etcd's refusal: cache enabled %v, oldest %v; want 0, 1999", en, o)
	}
	fail := ProbeResult{Outcome: Error, Err: apierrors.NewForbidden(pods.GVR().GroupResource(), "", nil)}
	for i := range 3 {
		fail.At = now.Add(time.Duration(i) * time.Second)
		w.record(p, pods, fail)
		if got := get(win, windowSecondsCol); math.IsNaN(got) != (i == 2) {
			t.Errorf("after %d failed intervals: window %v", i+1, got)
		}
		if ws := w.m.windows.windows(); (len(ws) == 0) != (i == 2) {
			t.Errorf("after %d failed intervals: windows() = %+v", i+1, ws)
		}
	}
}

// A resource in another etcd is timed by its own RVs: the main clock does
// not even know RVs that high.
func TestRecordResourceWindowOtherEtcd(t *testing.T) {
	reg := prometheus.NewRegistry()
	hist := rvclock.NewHistory(10)
	now := time.Now()
	hist.Observe(1000, now.Add(-100*time.Second))
	hist.Observe(2000, now)
	hist.Place("events", 50000, now.Add(-10*time.Second), false)
	hist.Place("events", 51000, now, true) // by chance between two main RVs: still the other etcd's
	events := resources.Resource{Version: "v1", Resource: "events"}
	w := newResourceWindows(ResourcesConfig{Resources: resources.Fixed(nil), Pace: resources.Pace{Interval: time.Second},
		Client: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())},
		newWindowVecs(testTables(reg)), hist, reg, testTables(reg), logr.Discard())
	w.follow([]resources.Resource{events})
	w.record(w.probed[events.Key()], events, ProbeResult{Outcome: Expired, Refusal: Refusal{Source: SourceWatchCache, Oldest: 50499}, Answered: now})
	s := w.m.windows.table.value("", "events", windowSecondsCol)
	n := w.m.windows.table.value("", "events", windowRVsCol)
	if math.Abs(s-5) > 0.01 || n != 501 {
		t.Errorf("events' window %v s, %v RVs; want 5 s (RV 50500 written 5 s ago by their own clock), 501", s, n)
	}
}

// A resource that discovery no longer lists loses every series, and leaves
// the fleet's windows; a new one gets them, NaN until measured. The
// ConfigMaps' series, the quiet ConfigMap's, are never touched.
func TestResourceWindowsFollowTheSet(t *testing.T) {
	reg := prometheus.NewRegistry()
	hist := rvclock.NewHistory(10)
	now := time.Now()
	hist.Observe(1000, now.Add(-100*time.Second))
	hist.Place("widgets.example.com", 2000, now, true)
	windows := newWindowVecs(testTables(reg))
	windows.set(Window{Resource: "configmaps", Oldest: 900, Seconds: 80}, 100)
	w := newResourceWindows(ResourcesConfig{Resources: resources.Fixed(nil), Pace: resources.Pace{Interval: 10 * time.Second, Budget: 10},
		Client: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())}, windows, hist, reg, testTables(reg), logr.Discard())
	widgets := resources.Resource{Group: "example.com", Version: "v1", Resource: "widgets"}
	gadgets := resources.Resource{Group: "example.com", Version: "v1", Resource: "gadgets"}
	cms := resources.Resource{Version: "v1", Resource: "configmaps"}
	count := func(name string) int {
		n, err := testutil.GatherAndCount(reg, name)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	w.follow([]resources.Resource{cms, widgets})
	w.record(w.probed[widgets.Key()], widgets, ProbeResult{Outcome: Expired, Refusal: Refusal{Source: SourceWatchCache, Oldest: 1499}, Answered: now})
	w.record(w.probed[widgets.Key()], widgets, ProbeResult{Outcome: Error, Err: apierrors.NewTooManyRequests("", 1)})
	if n, ws := count("watchcache_window_seconds"), len(w.m.windows.windows()); n != 2 || ws != 2 {
		t.Fatalf("configmaps and widgets: %d window series, %d windows; want 2, 2", n, ws)
	}
	if w.interval != 10*time.Second {
		t.Errorf("interval before the first round %v, want 10s (2 resources within 10 requests/s)", w.interval)
	}
	w.follow([]resources.Resource{cms, gadgets})
	for name, want := range map[string]int{"watchcache_window_seconds": 2, "watchcache_oldest_resource_version": 2,
		"watchcache_resource_watch_cache_enabled": 1, "watchcache_resource_probe_errors_total": 1} {
		if n := count(name); n != want {
			t.Errorf("widgets gone, gadgets new: %d series of %s, want %d", n, name, want)
		}
	}
	if _, ok := w.probed[widgets.Key()]; ok || len(w.probed) != 1 {
		t.Errorf("probes after widgets went: %v, want gadgets' alone", w.probed)
	}
	got := map[string]float64{}
	for _, win := range w.m.windows.windows() {
		got[win.Resource] = win.Seconds
	}
	if len(got) != 1 || got["configmaps"] != 80 {
		t.Errorf("known windows %v, want the ConfigMaps' alone", got)
	}
}

// testTables registers tables on reg without constant labels.
func testTables(reg prometheus.Registerer) tables {
	return tables{reg: &recordingRegisterer{Registerer: reg}}
}
