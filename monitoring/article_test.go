package monitoring

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/watchcache/watchcache-exporter/internal/owned"
	"github.com/watchcache/watchcache-exporter/test/arrivals"
	"github.com/watchcache/watchcache-exporter/test/browser"
	"github.com/watchcache/watchcache-exporter/test/exportertest"
	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

const testNS = "watchcache-test"

// TestArticleOnRealPrometheus reproduces the article on the real apiserver
// in one run at 85 writes/s, then restarts the apiserver under the exporter.
// The same run, scraped by two real Prometheus servers, serves the
// dashboards' check: every query, variable and recording rule must return
// series on both (the restart gives the error, relist and reset panels
// something to show), and the status page must draw its chart.
func TestArticleOnRealPrometheus(t *testing.T) {
	t.Parallel()
	// Two slots: its first 410 must come within 2 s of capacity/rate at 85
	// writes/s while two Prometheus servers scrape it. Not alone: waiting
	// for the machine to empty kept it and everything queued behind it
	// idle for 9 minutes of a 21-minute run.
	c := testcluster.Start(t, testcluster.Options{Slots: 2})
	ctx := t.Context()
	admin := kubernetes.NewForConfigOrDie(c.AdminConfig())
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apiserverCapacity := func() float64 {
		v, err := c.APIServer().MetricValue(ctx, "watch_cache_capacity", map[string]string{"resource": "configmaps"})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	t.Run("startup refusals", func(t *testing.T) {
		saCfg, err := c.ServiceAccountConfig(ctx, testNS, "no-rbac")
		if err != nil {
			t.Fatal(err)
		}
		code, out := exportertest.RunToExit(t, saCfg, "--namespace="+testNS)
		if code != 1 || !strings.Contains(out, "RBAC denies create configmaps in namespace "+testNS+"; list configmaps in namespace "+testNS+" (watchcache-quiet); get configmaps in namespace "+testNS+" (watchcache-quiet,watchcache-noise-0,") {
			t.Errorf("without RBAC: exit %d, output %q; want 1 and the denied verbs", code, out)
		}
		// Same-named ConfigMaps that are not the exporter's: refused, named
		// with the flag that picks another name, and left as they were.
		theirs := map[string]*corev1.ConfigMap{}
		for _, name := range []string{"watchcache-quiet", "watchcache-noise-3"} {
			cm, err := admin.CoreV1().ConfigMaps(testNS).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{owned.ManagedByLabel: owned.ManagedBy}},
				Data:       map[string]string{"theirs": "yes"},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			theirs[name] = cm
		}
		code, out = exportertest.RunToExit(t, c.AdminConfig(), "--namespace="+testNS)
		for _, want := range []string{
			"configmap " + testNS + "/watchcache-quiet exists and is not this exporter's: choose another name with --quiet.name",
			"configmaps watchcache-noise-3 of namespace " + testNS + " exist and are not this exporter's: choose another prefix with --noise.prefix",
		} {
			if code != 1 || !strings.Contains(out, want) {
				t.Errorf("others' ConfigMaps: exit %d, output %q; want 1 and %q", code, out, want)
			}
		}
		for name, cm := range theirs {
			got, err := admin.CoreV1().ConfigMaps(testNS).Get(ctx, name, metav1.GetOptions{})
			if err != nil || got.ResourceVersion != cm.ResourceVersion {
				t.Errorf("%s after the refusal: %v, RV %s; want RV %s", name, err, got.ResourceVersion, cm.ResourceVersion)
			}
			if err := admin.CoreV1().ConfigMaps(testNS).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		// So is a Lease of quiet's name that is not the exporter's.
		lease, err := admin.CoordinationV1().Leases(testNS).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "watchcache-quiet"},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("theirs")},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		code, out = exportertest.RunToExit(t, c.AdminConfig(), "--namespace="+testNS)
		if want := "lease " + testNS + "/watchcache-quiet exists and is not this exporter's: choose another name with --quiet.name"; code != 1 || !strings.Contains(out, want) {
			t.Errorf("their Lease: exit %d, output %q; want 1 and %q", code, out, want)
		}
		if got, err := admin.CoordinationV1().Leases(testNS).Get(ctx, lease.Name, metav1.GetOptions{}); err != nil || got.ResourceVersion != lease.ResourceVersion {
			t.Errorf("their Lease after the refusal: %v, %+v; want it as it was", err, got)
		}
		if err := admin.CoordinationV1().Leases(testNS).Delete(ctx, lease.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if left, err := admin.CoreV1().ConfigMaps(testNS).List(ctx, metav1.ListOptions{}); err != nil || len(left.Items) > 1 { // kube-root-ca.crt at most
			t.Errorf("ConfigMaps after the refusal: %v, %d; want none of the exporter's", err, len(left.Items))
		}
		gone := rest.CopyConfig(c.AdminConfig())
		gone.Host = "https://127.0.0.1:1"
		code, out = exportertest.RunToExit(t, gone)
		if code != 1 || !strings.Contains(out, "apiserver https://127.0.0.1:1 unreachable") {
			t.Errorf("unreachable apiserver: exit %d, output %q; want 1 and the address", code, out)
		}
	})

	const rate = 85
	// Every ConfigMap write, the exporter's and any other, as the test's
	// own watch receives it: the rate that fills the cache during the cycle.
	configMapEvents := arrivals.ConfigMaps(t, c.AdminConfig())
	e := exportertest.StartReady(t, c.AdminConfig(), "--namespace="+testNS, fmt.Sprintf("--load.rate=%d", rate), resourcesFlags[0], resourcesFlags[1])
	proms := startPrometheus(t, c, e.Addr)
	start := time.Now()
	var writesAtStart float64
	e.WaitFor(t, 30*time.Second, "load flowing", func(m exportertest.Metrics) bool {
		writesAtStart = m.Value(t, "watchcache_load_writes_total", "result", "ok")
		start = time.Now()
		return writesAtStart > 0
	})

	// The first cycle ends at the first 410 from its stale RV.
	var first exportertest.Metrics
	var firstAt time.Time
	e.WaitFor(t, 150*time.Second, "first expiry cycle", func(m exportertest.Metrics) bool {
		first, firstAt = m, time.Now()
		return m.Sum(t, "watchcache_expiry_cycles_total") >= 1
	})
	// Timed by the scrape: CI's run on a busy machine took 4 s more to read
	// the apiserver's capacity, and the rate read 80.03 for a steady 85.
	elapsed := firstAt.Sub(start).Seconds()
	capacity := apiserverCapacity()
	achieved := (first.Value(t, "watchcache_load_writes_total", "result", "ok") - writesAtStart) / elapsed
	expiry := first.Value(t, "watchcache_expiry_last_seconds")
	// The ConfigMap events the test's watch received over the cycle's own
	// span, not a rate from counters over another span.
	cycleRate := configMapEvents.Rate(firstAt, expiry)
	firstBookmark := first.Value(t, "watchcache_first_bookmark_last_seconds")
	windowRVs := first.Value(t, "watchcache_window_resource_versions", "resource", "configmaps")
	window := first.Value(t, "watchcache_window_seconds", "resource", "configmaps")
	estimated := first.Value(t, "watchcache_estimated_capacity_events")
	t.Logf("apiserver capacity %v; achieved %.2f writes/s over %.0f s, %.2f ConfigMap events/s in the cycle; first BOOKMARK %.2f s; first 410 after %.2f s (capacity/rate %.2f s); distance %v; window %.2f s, %v RVs",
		capacity, achieved, elapsed, cycleRate, firstBookmark, expiry, capacity/cycleRate,
		first.Value(t, "watchcache_stale_distance_last_resource_versions"), window, windowRVs)

	if firstBookmark < 55 || firstBookmark > 65 {
		t.Errorf("first BOOKMARK after %.2f s, want 55..65 s", firstBookmark)
	}
	if expiry < 75 {
		t.Errorf("first 410 after %.2f s, want at least 75 s", expiry)
	}
	if want := capacity / cycleRate; math.Abs(expiry-want) > 2 {
		t.Errorf("first 410 after %.2f s, want within 2 s of capacity/rate = %v/%.2f = %.2f s", expiry, capacity, cycleRate, want)
	}
	if n := first.Value(t, "watchcache_expiry_cycles_total", "bookmark_result", "ok"); n != 1 {
		t.Errorf("reconnect from the latest BOOKMARK at the first 410: %v cycles with result ok, want 1 (%v)", n, first.Samples("watchcache_expiry_cycles_total", "bookmark_result"))
	}
	// Read as the window probe's answer arrives, the window in RVs is the
	// capacity's ConfigMap events plus everything else etcd wrote between
	// them (the exporter's Lease renewals, the apiserver's own): etcd's own
	// history says which.
	oldest := first.Value(t, "watchcache_oldest_resource_version", "resource", "configmaps")
	newest := first.Value(t, "watchcache_newest_resource_version")
	if newest-oldest != windowRVs {
		t.Errorf("window_resource_versions %v, want newest_resource_version %v - oldest_resource_version %v", windowRVs, newest, oldest)
	}
	writes, err := c.EtcdWrites(ctx, uint64(oldest), uint64(newest))
	if err != nil {
		t.Fatal(err)
	}
	configMaps := float64(writes["configmaps"])
	t.Logf("window %v RVs, estimated capacity %v: %+.2f%% and %+.2f%% against the capacity %v; etcd's writes in (%v, %v] by resource: %v",
		windowRVs, estimated, 100*(windowRVs-capacity)/capacity, 100*(estimated-capacity)/capacity, capacity, oldest, newest, writes)
	if math.Abs(configMaps-capacity) > 0.003*capacity {
		t.Errorf("etcd wrote %v ConfigMaps in the window (%v, %v], want within 0.3%% of the capacity %v: the newest RV was read late or early", configMaps, oldest, newest, capacity)
	}
	if math.Abs(estimated-capacity) > 0.003*capacity {
		t.Errorf("estimated_capacity_events %v, want within 0.3%% of the capacity %v", estimated, capacity)
	}
	if math.Abs(achieved-rate) > 0.03*rate {
		t.Errorf("achieved %.2f writes/s, want within 3%% of %d", achieved, rate)
	}
	if d := first.Value(t, "watchcache_stale_distance_last_resource_versions"); d <= 0 {
		t.Errorf("stale_rv_distance_last %v at a 410, want > 0", d)
	}

	// The plain watcher sees the touches of quiet and nothing else.
	e.WaitFor(t, 10*time.Second, "plain watcher to see every touch", func(m exportertest.Metrics) bool {
		return m.Value(t, "watchcache_watch_events_total", "watcher", "plain", "type", "MODIFIED") == m.Value(t, "watchcache_quiet_touches_total")
	})
	if s := e.Scrape(t).Samples("watchcache_watch_events_total", "watcher"); len(s["plain"]) != 1 {
		t.Errorf("plain watcher events by type: %v, want MODIFIED only", s["plain"])
	}

	t.Run("promtool check metrics", e.CheckMetrics)

	// An apiserver restart: every RV the exporter holds is refused at once.
	// That is a cache reset, not an expiry.
	before := e.Scrape(t)
	if err := c.APIServer().Restart(ctx); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, 60*time.Second, "relists of both watchers and a new cycle after the restart", func(m exportertest.Metrics) bool {
		return m.Value(t, "watchcache_relists_total", "watcher", "plain") > before.Value(t, "watchcache_relists_total", "watcher", "plain") &&
			m.Value(t, "watchcache_relists_total", "watcher", "bookmarks") > before.Value(t, "watchcache_relists_total", "watcher", "bookmarks") &&
			m.Value(t, "watchcache_quiet_touches_total") > before.Value(t, "watchcache_quiet_touches_total")
	})
	e.WaitFor(t, 30*time.Second, "readiness after the restart", func(exportertest.Metrics) bool { return e.Ready() })
	after := e.Scrape(t)
	if r := after.Sum(t, "watchcache_cache_resets_total") - before.Sum(t, "watchcache_cache_resets_total"); r != 1 {
		t.Errorf("%v cache resets counted for one apiserver restart, want 1", r)
	}
	if n, m := after.Sum(t, "watchcache_expiry_cycles_total"), before.Sum(t, "watchcache_expiry_cycles_total"); n != m {
		t.Errorf("the restart ended %v expiry cycles, want 0: a reset is not an expiry", n-m)
	}
	if h, g := histogramCount(t, after, "watchcache_expiry_seconds"), histogramCount(t, before, "watchcache_expiry_seconds"); h != g {
		t.Errorf("the restart added %v to watchcache_expiry_seconds, want 0", h-g)
	}

	// The dashboards on what both Prometheus servers scraped of the run.
	checkDashboards(t, proms)
	page := browser.CheckStatusPage(t, e.Addr, "")
	if !strings.Contains(page.About, "mode: load") || !strings.Contains(page.About, "leader") {
		t.Errorf("status page says %q, want load mode and leader", page.About)
	}
	if want := []string{"configmaps", "pods", "leases.coordination.k8s.io"}; len(page.Resources) != len(want) {
		t.Errorf("status page lists %v, want %v", page.Resources, want)
	}

	// A graceful stop deletes what the exporter made.
	if code := e.Stop(t); code != 0 {
		t.Errorf("exit status %d after SIGTERM, want 0", code)
	}
	left, err := admin.CoreV1().ConfigMaps(testNS).List(ctx, metav1.ListOptions{LabelSelector: owned.ManagedBySelector})
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Items) > 0 {
		t.Errorf("%d owned ConfigMaps left after a graceful stop", len(left.Items))
	}
}

func histogramCount(t *testing.T, m exportertest.Metrics, name string) uint64 {
	t.Helper()
	fam, ok := m[name]
	if !ok || len(fam.GetMetric()) != 1 {
		t.Fatalf("%s: want one histogram", name)
	}
	return fam.GetMetric()[0].GetHistogram().GetSampleCount()
}
