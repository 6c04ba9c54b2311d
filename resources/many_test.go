package resources_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/watchcache/watchcache-exporter/internal/gathered"
	"github.com/watchcache/watchcache-exporter/resources"
	"github.com/watchcache/watchcache-exporter/test/exportertest"
	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

// The CRDs of TestManyResources: all in one group, so that the apiserver's
// own request counts of that group are the exporter's requests for them.
const (
	crdGroup = "many.watchcache.test"
	crds     = 300
	budget   = 40.0 // --resources.budget of the test, requests/s
)

// TestManyResources: 300 CRDs and --resources=all. The start check costs the
// same whatever the number of resources, so the exporter is ready in well
// under a minute; every resource is measured; the interval stretches so that
// the requests for them, counted by the apiserver itself, stay within
// --resources.budget; a CRD installed while it runs is measured and a deleted
// one loses its series, without a restart.
func TestManyResources(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	ctx := t.Context()
	cfg := c.AdminConfig()
	cfg.QPS = -1
	admin := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	for i := range crds {
		createCRD(t, dyn, plural(i))
	}
	waitServed(t, admin, crds)
	t.Logf("%d CRDs created and served in %s", crds, time.Since(t0).Round(time.Second))

	served, err := testcluster.ServedListWatch(admin.Discovery())
	if err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	exp := exportertest.Start(t, c.AdminConfig(), "--namespace="+ns, "--load.rate=0", "--resources=all",
		fmt.Sprintf("--resources.budget=%v", budget), "--resources.rediscover=15s")
	exp.WaitReady(t, time.Minute)
	t.Logf("ready %s after start, with %d resources served", time.Since(t1).Round(100*time.Millisecond), served)

	// Each resource but configmaps (the quiet ConfigMap's probes measure
	// those) costs a probe and a count per interval.
	ivl := resources.Pace{Interval: 10 * time.Second, Budget: budget}.For(served - 1)
	exp.WaitFor(t, ivl+time.Minute, "every resource measured", func(m exportertest.Metrics) bool {
		n, known := windows(m)
		t.Logf("%d window series, %d known, of %d resources served", n, known, served)
		return n == served && known == served
	})
	if got := exp.Scrape(t).Value(t, "watchcache_resource_probe_interval_seconds", "group", crdGroup, "resource", plural(0)); got < ivl.Seconds() || got > ivl.Seconds()*1.5 {
		t.Errorf("probe interval %v s, want %v (%d resources within %v requests/s)", got, ivl.Seconds(), served-1, budget)
	}

	// The apiserver's own count of requests for the CRDs, over three
	// intervals: per resource a probe and a count each interval. A round's
	// probes go out together, so the three intervals start between two
	// rounds' probes (half an interval after a round's gauges change):
	// starting anywhere, they could hold four rounds' (cold run 6).
	end := roundEnd(t, exp, ivl)
	time.Sleep(time.Until(end.Add(ivl / 2)))
	from := time.Now()
	before := crdRequests(t, c, "")
	time.Sleep(time.Until(from.Add(3 * ivl)))
	after, secs := crdRequests(t, c, ""), (3 * ivl).Seconds()
	rate := (after - before) / secs
	perResource := rate / crds
	total := perResource * float64(served-1)
	t.Logf("requests for the %d CRDs: %.1f/s; at that rate per resource, %.1f/s for all %d (budget %v/s, interval %s)",
		crds, rate, total, served-1, budget, ivl)
	if total > budget*1.05 {
		t.Errorf("%.1f requests/s for the resources, over the budget of %v", total, budget)
	}
	if want := 2 / ivl.Seconds(); perResource < want*0.8 {
		t.Errorf("%.3f requests/s per resource, want about %.3f (a probe and a count every %s)", perResource, want, ivl)
	}

	// One CRD more, one fewer: measured and dropped at the next discovery.
	late, gone := "lates", plural(0)
	createCRD(t, dyn, late)
	if err := dyn.Resource(testcluster.CRDs).Delete(ctx, gone+"."+crdGroup, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t2 := time.Now()
	exp.WaitFor(t, 15*time.Second+2*ivl+time.Minute, "the new CRD measured and the deleted one dropped", func(m exportertest.Metrics) bool {
		has := func(family, resource string) bool {
			for _, x := range m[family].GetMetric() {
				if gathered.Label(x, "group") == crdGroup && gathered.Label(x, "resource") == resource {
					return !math.IsNaN(x.GetGauge().GetValue())
				}
			}
			return false
		}
		return has("watchcache_window_seconds", late) && has("watchcache_resource_objects", late) &&
			!has("watchcache_window_seconds", gone) && !has("watchcache_resource_objects", gone) && !has("watchcache_resource_probe_interval_seconds", gone)
	})
	t.Logf("a CRD added and one deleted: measured and dropped %s later", time.Since(t2).Round(time.Second))
	if !strings.Contains(exp.Logs(), "the resources served changed") {
		t.Error("no log line says which resources came and went")
	}

	// A restart. The apiserver builds each CRD's watch cache again at the
	// first request for it, and answers 429 "storage is (re)initializing"
	// until the cache has listed: the longer with thousands of objects.
	// Each 429 is counted as what it is, one for one with the apiserver's
	// own count, and every resource is measured again after it. (Requests
	// refused while it was down are counted too, as Unknown.)
	big := schema.GroupVersionResource{Group: crdGroup, Version: "v1", Resource: plural(1)}
	const objects = 3000
	for i := range objects {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": crdGroup + "/v1", "kind": "Widget001",
			"metadata": map[string]any{"name": fmt.Sprintf("w%04d", i)},
			"data":     strings.Repeat("x", 2000),
		}}
		if _, err := dyn.Resource(big).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := dyn.Resource(big).Namespace(ns).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	rv, err := strconv.ParseUint(l.GetResourceVersion(), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	// The exporter's count of the group's failed requests of a reason, grown
	// from m0 to now: per series, the series restarted from 0 where it
	// went down (a resource missing from discovery while the apiserver
	// restarted is dropped, and its series with it, then measured again).
	errs := func(m0, now exportertest.Metrics, reason string) float64 {
		counts := func(m exportertest.Metrics) map[string]float64 {
			out := map[string]float64{}
			for _, f := range []string{"watchcache_resource_probe_errors_total", "watchcache_resource_objects_errors_total"} {
				for _, x := range m[f].GetMetric() {
					if gathered.Label(x, "group") == crdGroup && gathered.Label(x, "reason") == reason {
						out[f+"/"+gathered.Label(x, "resource")] = x.GetCounter().GetValue()
					}
				}
			}
			return out
		}
		before, n := counts(m0), 0.0
		for k, v := range counts(now) {
			if v >= before[k] {
				v -= before[k]
			}
			n += v
		}
		return n
	}
	// A restart meets a cache that is initialising only if a request of the
	// exporter's reaches it meanwhile, which a busy machine may delay past
	// it: the apiserver is restarted again, up to three times, until one
	// does.
	var m0, m1 exportertest.Metrics
	var apiserver429 float64 // since its last restart
	for restart := 1; ; restart++ {
		m0 = exp.Scrape(t)
		t3 := time.Now()
		if err := c.APIServer().Restart(ctx); err != nil {
			t.Fatal(err)
		}
		exp.WaitFor(t, 2*ivl+time.Minute, "every CRD measured again after the restart", func(m exportertest.Metrics) bool {
			n := 0
			for _, x := range m["watchcache_oldest_resource_version"].GetMetric() {
				if gathered.Label(x, "group") == crdGroup {
					if !(x.GetGauge().GetValue() > float64(rv)) {
						return false
					}
					n++
				}
			}
			return n == crds // one deleted, one added
		})
		t.Logf("every CRD measured again %s after restart %d began", time.Since(t3).Round(time.Second), restart)
		// A round's answers are recorded when the whole round ends, so
		// answers may be in flight: the two counts are compared once they
		// agree or two intervals have passed, whichever comes first.
		for deadline := time.Now().Add(2 * ivl); ; time.Sleep(time.Second) {
			m1, apiserver429 = exp.Scrape(t), crdRequests(t, c, "429")
			if errs(m0, m1, "CacheInitializing") == apiserver429 || time.Now().After(deadline) {
				break
			}
		}
		if apiserver429 > 0 || restart == 3 {
			break
		}
		t.Logf("restart %d: no request of the exporter's met an initialising cache; restarting again", restart)
	}
	initializing := errs(m0, m1, "CacheInitializing")
	t.Logf("after a restart with %d objects in %s: the apiserver answered %v requests of the CRDs' group with 429; the exporter counted %v as CacheInitializing",
		objects, big.Resource, apiserver429, initializing)
	if apiserver429 == 0 {
		t.Error("no 429 from the apiserver after its restart: the test did not meet a cache that was initialising")
	}
	if initializing != apiserver429 {
		t.Errorf("the exporter counted %v answers as CacheInitializing, the apiserver answered %v with 429", initializing, apiserver429)
	}
	if n := errs(m0, m1, "TooManyRequests"); n != 0 {
		t.Errorf("%v answers of an initialising cache counted as TooManyRequests, want 0", n)
	}
	t.Logf("%v requests failed while the apiserver was down (reason Unknown)", errs(m0, m1, "Unknown"))
}

func plural(i int) string { return fmt.Sprintf("widget%03ds", i) }

func createCRD(t *testing.T, dyn dynamic.Interface, plural string) {
	t.Helper()
	crd := testcluster.CRD(crdGroup, plural)
	err := wait.PollUntilContextTimeout(t.Context(), time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(testcluster.CRDs).Create(ctx, crd, metav1.CreateOptions{})
		return err == nil || apierrors.IsAlreadyExists(err), nil
	})
	if err != nil {
		t.Fatalf("create CRD %s: %v", plural, err)
	}
}

// waitServed waits until discovery serves n resources of the CRDs' group.
func waitServed(t *testing.T, admin kubernetes.Interface, n int) {
	t.Helper()
	var got int
	err := wait.PollUntilContextTimeout(t.Context(), 2*time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := admin.Discovery().ServerResourcesForGroupVersion(crdGroup + "/v1")
		if err != nil {
			return false, nil
		}
		got = len(l.APIResources)
		return got == n, nil
	})
	if err != nil {
		t.Fatalf("%d resources of %s served, want %d: %v", got, crdGroup, n, err)
	}
}

// windows counts the window series and those with a known window.
// roundEnd waits until a round of probes has ended, as the change of a
// CRD's window gauge tells (the round sets the gauges once its probes have
// answered), and returns when.
func roundEnd(t *testing.T, exp *exportertest.Exporter, ivl time.Duration) time.Time {
	t.Helper()
	window := func() float64 {
		return exp.Scrape(t).Value(t, "watchcache_window_seconds", "group", crdGroup, "resource", plural(1))
	}
	first := window()
	for deadline := time.Now().Add(2 * ivl); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if w := window(); w != first {
			return time.Now()
		}
	}
	t.Fatalf("the window of %s unchanged for two intervals (%s)", plural(1), 2*ivl)
	return time.Time{}
}

func windows(m exportertest.Metrics) (n, known int) {
	for _, x := range m["watchcache_window_seconds"].GetMetric() {
		n++
		if v := x.GetGauge().GetValue(); !math.IsNaN(v) && v > 0 {
			known++
		}
	}
	return n, known
}

// crdRequests sums the apiserver's apiserver_request_total over the CRDs'
// group: every verb and resource, and every code or only code.
func crdRequests(t *testing.T, c *testcluster.Cluster, code string) float64 {
	t.Helper()
	fams, err := c.APIServer().Metrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, x := range fams["apiserver_request_total"].GetMetric() {
		if gathered.Label(x, "group") == crdGroup && (code == "" || gathered.Label(x, "code") == code) {
			sum += x.GetCounter().GetValue()
		}
	}
	return sum
}
