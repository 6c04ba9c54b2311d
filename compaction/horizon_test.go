package compaction

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"

	"github.com/watchcache/watchcache-exporter/internal/gathered"
	"github.com/watchcache/watchcache-exporter/resources"
	"github.com/watchcache/watchcache-exporter/rvclock"
)

// fakeEtcd answers LISTs at an exact RV as etcd does after compacting to
// compacted: refused below it, served from it on. It counts the LISTs.
type fakeEtcd struct {
	mu        sync.Mutex
	compacted uint64
	err       error // every LIST fails with it when set
	lists     int
}

func (f *fakeEtcd) compact(rv uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.compacted = rv
}

func (f *fakeEtcd) list(_ context.Context, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	if f.err != nil {
		return nil, f.err
	}
	if opts.ResourceVersionMatch != metav1.ResourceVersionMatchExact || opts.Limit != 1 {
		return nil, errors.New("want an exact LIST with limit=1")
	}
	rv, err := strconv.ParseUint(opts.ResourceVersion, 10, 64)
	if err != nil {
		return nil, err
	}
	if rv < f.compacted {
		return nil, apierrors.NewResourceExpired("The resourceVersion for the provided list is too old.")
	}
	return &metav1.PartialObjectMetadataList{}, nil
}

func (f *fakeEtcd) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.lists
	f.lists = 0
	return n
}

// clockUpTo is a clock that knew RVs from..to, one a second, to now.
func clockUpTo(from, to uint64, now time.Time) *rvclock.Clock {
	c := rvclock.NewClock(1<<12, 0)
	for rv := from; rv <= to; rv++ {
		c.Observe(rv, now.Add(-time.Duration(to-rv)*time.Second))
	}
	return c
}

func newTestHorizon(t *testing.T, hist *rvclock.History, set *resources.Set, interval time.Duration) (*Horizon, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	h := New(Config{Client: metadatafake.NewSimpleMetadataClient(scheme.Scheme), Namespace: "ns", History: hist,
		Resources: set, Interval: interval}, reg, logr.Discard())
	h.running = true // a leader's, as Run marks it; these tests check without Run
	return h, reg
}

func compare(t *testing.T, reg *prometheus.Registry, want string, names ...string) {
	t.Helper()
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

// TestCheckFollowsCompaction: the compacted RV is found by bisection after
// each compaction and kept with one LIST per check in between; a
// compaction seen counts, and two give the interval.
func TestCheckFollowsCompaction(t *testing.T) {
	now := time.Now()
	hist := &rvclock.History{Clock: clockUpTo(100, 1100, now)}
	h, reg := newTestHorizon(t, rvclock.NewHistory(16), nil, time.Minute)
	h.cfg.History = hist
	etcd := &fakeEtcd{}
	tgt := target{hist.Clock, etcd.list, "", "configmaps"}
	ctx := t.Context()

	h.check(ctx, tgt) // never compacted: RV 1 served
	if n := etcd.calls(); n != 1 {
		t.Errorf("never compacted: %d LISTs, want 1", n)
	}
	m := gather(t, reg)
	if v := m["watchcache_compacted_resource_version"]; v != 0 {
		t.Errorf("never compacted: compacted_resource_version %v, want 0", v)
	}
	if m["watchcache_compaction_window_lower_bound"] != 1 || !within(m["watchcache_compaction_window_seconds"], 1000, 2) {
		t.Errorf("never compacted: window %v s, lower bound %v; want at least the clock's 1000 s, a lower bound",
			m["watchcache_compaction_window_seconds"], m["watchcache_compaction_window_lower_bound"])
	}

	etcd.compact(600)
	h.check(ctx, tgt)
	if n := etcd.calls(); n > 2+11 { // RV 1, the newest, log2(1099)
		t.Errorf("first compaction found with %d LISTs, want at most 13", n)
	}
	m = gather(t, reg)
	if m["watchcache_compacted_resource_version"] != 600 || m["watchcache_compactions_total"] != 1 {
		t.Errorf("after compacting to 600: compacted %v, compactions %v; want 600, 1", m["watchcache_compacted_resource_version"], m["watchcache_compactions_total"])
	}
	if !within(m["watchcache_compaction_window_seconds"], 500, 2) || m["watchcache_compaction_window_lower_bound"] != 0 {
		t.Errorf("window %v s (lower bound %v), want the age of RV 600, 500 s", m["watchcache_compaction_window_seconds"], m["watchcache_compaction_window_lower_bound"])
	}
	if !math.IsNaN(m["watchcache_compaction_interval_seconds"]) {
		t.Errorf("one compaction seen: interval %v, want NaN", m["watchcache_compaction_interval_seconds"])
	}

	h.check(ctx, tgt) // no compaction since: one LIST
	if n := etcd.calls(); n != 1 {
		t.Errorf("no compaction since: %d LISTs, want 1", n)
	}
	time.Sleep(20 * time.Millisecond)
	etcd.compact(900)
	h.check(ctx, tgt)
	m = gather(t, reg)
	if m["watchcache_compacted_resource_version"] != 900 || m["watchcache_compactions_total"] != 2 {
		t.Errorf("after compacting to 900: compacted %v, compactions %v; want 900, 2", m["watchcache_compacted_resource_version"], m["watchcache_compactions_total"])
	}
	if iv := m["watchcache_compaction_interval_seconds"]; !(iv >= 0.02 && iv < 5) {
		t.Errorf("interval between the two compactions seen %v s, want about 0.02", iv)
	}
	if last := m["watchcache_last_compaction_timestamp_seconds"]; math.Abs(last-float64(time.Now().Unix())) > 5 {
		t.Errorf("last compaction at %v, want about now", last)
	}
}

// TestCheckFirstSeesCompacted: at start, a compaction from before is found
// but not counted as one seen.
func TestCheckFirstSeesCompacted(t *testing.T) {
	now := time.Now()
	hist := &rvclock.History{Clock: clockUpTo(100, 1100, now)}
	h, reg := newTestHorizon(t, rvclock.NewHistory(16), nil, time.Minute)
	h.cfg.History = hist
	etcd := &fakeEtcd{compacted: 321}
	h.check(t.Context(), target{hist.Clock, etcd.list, "", "configmaps"})
	compare(t, reg, `
# HELP watchcache_compactions_total `+helpCompactions+`
# TYPE watchcache_compactions_total counter
watchcache_compactions_total{group="",resource="configmaps"} 0
`, "watchcache_compactions_total")
	if m := gather(t, reg); m["watchcache_compacted_resource_version"] != 321 || !math.IsNaN(m["watchcache_last_compaction_timestamp_seconds"]) {
		t.Errorf("compacted %v, last compaction %v; want 321, NaN", m["watchcache_compacted_resource_version"], m["watchcache_last_compaction_timestamp_seconds"])
	}
}

// TestCheckErrors: a failing LIST keeps what was found, counts the error,
// and after StaleAfter intervals without an answer the horizon is NaN.
func TestCheckErrors(t *testing.T) {
	now := time.Now()
	hist := &rvclock.History{Clock: clockUpTo(100, 1100, now)}
	h, reg := newTestHorizon(t, rvclock.NewHistory(16), nil, 10*time.Millisecond)
	h.cfg.History = hist
	etcd := &fakeEtcd{compacted: 500}
	tgt := target{hist.Clock, etcd.list, "", "configmaps"}
	h.check(t.Context(), tgt)
	etcd.err = apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("RBAC"))
	etcd.compact(800)
	h.check(t.Context(), tgt)
	if m := gather(t, reg); m["watchcache_compacted_resource_version"] != 500 {
		t.Errorf("after a failed check: compacted %v, want the last found, 500", m["watchcache_compacted_resource_version"])
	}
	compare(t, reg, `
# HELP watchcache_compaction_probe_errors_total `+helpErrors+`
# TYPE watchcache_compaction_probe_errors_total counter
watchcache_compaction_probe_errors_total{reason="Forbidden"} 1
`, "watchcache_compaction_probe_errors_total")
	time.Sleep(40 * time.Millisecond) // 3 intervals
	if m := gather(t, reg); !math.IsNaN(m["watchcache_compacted_resource_version"]) || !math.IsNaN(m["watchcache_compaction_window_seconds"]) {
		t.Errorf("3 intervals without an answer: compacted %v, window %v; want NaN", m["watchcache_compacted_resource_version"], m["watchcache_compaction_window_seconds"])
	}
}

// TestEtcdsApart: a resource in another etcd is probed through itself and
// gets that etcd's horizon; one not placed yet has none.
func TestEtcdsApart(t *testing.T) {
	hist := rvclock.NewHistory(16)
	now := time.Now()
	for rv := uint64(1000); rv <= 2000; rv += 10 {
		hist.Observe(rv, now.Add(-time.Duration(2000-rv)*time.Second))
	}
	events := resources.Resource{Version: "v1", Resource: "events", Namespaced: true}
	pods := resources.Resource{Version: "v1", Resource: "pods", Namespaced: true}
	secrets := resources.Resource{Version: "v1", Resource: "secrets", Namespaced: true}
	hist.Place("pods", 1500, now, true)
	hist.Place("events", 40, now.Add(-30*time.Second), false)
	hist.Place("events", 70, now, false)
	h, reg := newTestHorizon(t, hist, resources.Fixed([]resources.Resource{events, pods, secrets}), time.Minute)
	targets := h.targets()
	if len(targets) != 2 || targets[0].name != "configmaps" || targets[1].name != "events" {
		t.Fatalf("targets %v, want configmaps and events", targets)
	}
	main, other := &fakeEtcd{compacted: 1200}, &fakeEtcd{compacted: 55}
	h.check(t.Context(), target{targets[0].clk, main.list, "", "configmaps"})
	h.check(t.Context(), target{targets[1].clk, other.list, "", "events"})
	compare(t, reg, `
# HELP watchcache_compacted_resource_version `+helpCompacted+`
# TYPE watchcache_compacted_resource_version gauge
watchcache_compacted_resource_version{group="",resource="configmaps"} 1200
watchcache_compacted_resource_version{group="",resource="events"} 55
watchcache_compacted_resource_version{group="",resource="pods"} 1200
watchcache_compacted_resource_version{group="",resource="secrets"} NaN
`, "watchcache_compacted_resource_version")
	m := byResource(t, reg)["watchcache_compaction_window_seconds"]
	if !within(m["configmaps"], 800, 2) || !within(m["pods"], 800, 2) || !within(m["events"], 15, 2) {
		t.Errorf("windows %v: want configmaps and pods 800 s (RV 1200 of the main etcd), events 15 s (RV 55 of theirs)", m)
	}
}

// TestTimeList: every page is listed, and an expired continue token is an
// error, not a time.
func TestTimeList(t *testing.T) {
	h, reg := newTestHorizon(t, rvclock.NewHistory(16), nil, time.Minute)
	pages := func(n int, expireAt int) lister {
		i := 0
		return func(_ context.Context, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
			i++
			if opts.Limit != PageSize || (i > 1) != (opts.Continue != "") {
				return nil, errors.New("want limit=500 and the last page's continue token")
			}
			if i == expireAt {
				return nil, apierrors.NewResourceExpired("The provided continue parameter is too old to display a consistent list result.")
			}
			l := &metav1.PartialObjectMetadataList{}
			if i < n {
				l.Continue = strconv.Itoa(i)
			}
			return l, nil
		}
	}
	if _, got, ok := h.timeList(t.Context(), "pods", pages(3, 0)); got != 3 || !ok {
		t.Errorf("%d pages timed (ok %v), want 3", got, ok)
	}
	if _, got, ok := h.timeList(t.Context(), "pods", pages(3, 2)); ok {
		t.Errorf("a LIST refused at its second page timed %d pages, want none", got)
	}
	compare(t, reg, `
# HELP watchcache_compaction_probe_errors_total `+helpErrors+`
# TYPE watchcache_compaction_probe_errors_total counter
watchcache_compaction_probe_errors_total{reason="Expired"} 1
`, "watchcache_compaction_probe_errors_total")
}

// TestRun: Run checks through the client until ctx ends, leaves no
// goroutine, and forgets what it found (a standby's would be stale).
func TestRun(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	hist := rvclock.NewHistory(16)
	hist.Observe(10, time.Now())
	client := metadatafake.NewSimpleMetadataClient(scheme.Scheme)
	var mu sync.Mutex
	lists := 0
	client.PrependReactor("list", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		l := a.(clienttesting.ListActionImpl)
		if l.Namespace != "ns" || l.ListOptions.FieldSelector != "metadata.name=quiet" {
			t.Errorf("LIST in namespace %q of %q, want the quiet ConfigMap of ns", l.Namespace, l.ListOptions.FieldSelector)
		}
		lists++
		return true, &metav1.List{}, nil
	})
	reg := prometheus.NewRegistry()
	h := New(Config{Client: client, Namespace: "ns", QuietName: "quiet", History: hist, Interval: 10 * time.Millisecond}, reg, logr.Discard())
	if m := gather(t, reg); hasHorizon(m) {
		t.Errorf("before Run: %v, want no horizon", m)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	h.Run(ctx)
	mu.Lock()
	defer mu.Unlock()
	if lists < 3 {
		t.Errorf("%d LISTs in 100 ms, want one every 10 ms", lists)
	}
	// A standby (Run ended, or never started) knows no horizon.
	if m := gather(t, reg); hasHorizon(m) {
		t.Errorf("after Run: %v, want no horizon", m)
	}
}

// hasHorizon says whether m holds a per-resource series of the horizon.
func hasHorizon(m map[string]float64) bool {
	for _, name := range []string{"watchcache_compaction_window_seconds", "watchcache_compacted_resource_version", "watchcache_compactions_total"} {
		if _, ok := m[name]; ok {
			return true
		}
	}
	return false
}

func within(got, want, abs float64) bool { return math.Abs(got-want) <= abs }

// byResource is every family's value by resource ("" for those without
// the label).
func byResource(t *testing.T, reg *prometheus.Registry) map[string]map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]float64{}
	for _, f := range fams {
		out[f.GetName()] = map[string]float64{}
		for _, m := range f.GetMetric() {
			out[f.GetName()][gathered.Label(m, "resource")] = gathered.Value(m)
		}
	}
	return out
}

// gather is each family's value for configmaps, or its only one.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for name, rs := range byResource(t, reg) {
		if v, ok := rs["configmaps"]; ok {
			out[name] = v
		} else if v, ok := rs[""]; ok {
			out[name] = v
		}
	}
	return out
}

// TestOneRequestAtATime: the checks and the timed LIST's pages share an
// unthrottled client, so they take turns: never two of its requests in
// flight, as an apiserver that counts them sees.
func TestOneRequestAtATime(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var mu sync.Mutex
	inFlight, most, pages, checks := 0, 0, 0, 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		ours := q.Get("resourceVersionMatch") == "Exact" || q.Get("limit") == strconv.Itoa(PageSize)
		if ours {
			mu.Lock()
			inFlight++
			most = max(most, inFlight)
			if q.Get("limit") == strconv.Itoa(PageSize) {
				pages++
			} else {
				checks++
			}
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
			defer func() { mu.Lock(); inFlight--; mu.Unlock() }()
		}
		// 1200 pods, served in pages; RV 100, served at any exact RV.
		l := metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadataList"},
			ListMeta: metav1.ListMeta{ResourceVersion: "100"}}
		if strings.HasSuffix(r.URL.Path, "/pods") {
			n := int64(1199)
			l.RemainingItemCount = &n
			if q.Get("limit") == strconv.Itoa(PageSize) && q.Get("continue") != "2" {
				c, _ := strconv.Atoi(q.Get("continue"))
				l.Continue = strconv.Itoa(c + 1)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(l)
	}))
	defer srv.Close()
	client, err := metadata.NewForConfig(&rest.Config{Host: srv.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	hist := rvclock.NewHistory(16)
	hist.Observe(100, time.Now())
	set := resources.Fixed([]resources.Resource{{Version: "v1", Resource: "pods", Namespaced: true}})
	objects := resources.NewObjects(client, set, hist, func(context.Context) (uint64, error) { return 100, nil }, prometheus.NewRegistry(), logr.Discard())
	h := New(Config{Client: client, Namespace: "ns", QuietName: "quiet", History: hist, Resources: set, Objects: objects,
		Interval: time.Millisecond, ListInterval: time.Millisecond}, prometheus.NewRegistry(), logr.Discard())
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { objects.Run(ctx, resources.Pace{Interval: time.Hour}) })
	h.Run(ctx)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d checks and %d pages of timed LISTs, at most %d in flight", checks, pages, most)
	if checks < 5 || pages < 6 {
		t.Fatalf("%d checks and %d pages in 300 ms: the test did not make both kinds of request", checks, pages)
	}
	if most != 1 {
		t.Errorf("%d requests in flight at once, want 1", most)
	}
}
