//go:build versions

// Package versions_test checks what the exporter assumes about the watch
// cache against kube-apiserver of other minor versions: make test-versions
// builds each one of hack/kube/versions into bin/v1.XX and runs this. CI
// runs only the pinned v1.37 (the other packages' tests), for time.
package versions_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/watchcache/watchcache-exporter/apiservers"
	"github.com/watchcache/watchcache-exporter/collector"
	"github.com/watchcache/watchcache-exporter/test/exportertest"
	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

// VersionsEnv lists the bin/ folders to test, e.g. "v1.34 v1.36"; "."
// is the pinned version in bin/ itself. Default: every version of
// hack/kube/versions, then the pinned one.
const VersionsEnv = "WATCHCACHE_KUBE_VERSIONS"

// RowsEnv names a file that receives one Markdown table row per version
// (make test-versions: bin/compatibility-rows.md, for docs/compatibility.md).
const RowsEnv = "WATCHCACHE_COMPAT_ROWS"

const (
	testNS = "watchcache-versions"
	rate   = 40.0 // writes/s: capacity 3200 for the 75 s window, 6400 for 135 s
	run    = 4 * time.Minute
)

func TestVersions(t *testing.T) {
	testcluster.Real(t)
	root, err := testcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	versions := strings.Fields(os.Getenv(VersionsEnv))
	if len(versions) == 0 {
		dirs, err := os.ReadDir(filepath.Join(root, "hack", "kube", "versions"))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range dirs {
			versions = append(versions, d.Name())
		}
		versions = append(versions, ".")
	}
	var rows []string
	for _, v := range versions {
		dir := filepath.Join(root, "bin", v)
		if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err != nil {
			testcluster.Missing(t, fmt.Sprintf("%s: no kube-apiserver; build it with ./hack/kube/build.sh --version %s (make test-versions does)", dir, v))
		}
		t.Run(v, func(t *testing.T) {
			rows = append(rows, checkVersion(t, dir))
		})
	}
	if out := os.Getenv(RowsEnv); out != "" {
		if err := os.WriteFile(out, []byte(strings.Join(rows, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type sample struct {
	at                     time.Time
	writes                 float64
	windowA, predictA      float64
	windowVA               float64
	capacityA, capacityB   float64
	passiveB, predictB     float64
	expiryA, firstBookmark float64
}

// checkVersion runs two apiservers of one version on one etcd, A with the
// default history window and B with --request-timeout=2m, a loaded
// exporter measuring both at 40 writes/s, and a passive one measuring B; it
// returns the version's row of docs/compatibility.md.
func checkVersion(t *testing.T, binDir string) string {
	c := testcluster.Start(t, testcluster.Options{BinDir: binDir})
	ctx := t.Context()
	b, err := c.AddAPIServer(ctx, "--request-timeout=2m")
	if err != nil {
		t.Fatal(err)
	}
	a := c.APIServer()
	admin := kubernetes.NewForConfigOrDie(c.AdminConfig())
	sv, err := admin.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	version := sv.GitVersion
	t.Logf("kube-apiserver %s from %s", version, binDir)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The "apiserver" label values, as the exporter derives them.
	list := a.URL() + "," + b.URL()
	eps, err := apiservers.ParseList(list)
	if err != nil {
		t.Fatal(err)
	}
	idA, idB := eps[0].ID, eps[1].ID
	loaded := exportertest.Start(t, c.AdminConfig(), "--namespace="+testNS,
		"--apiservers="+list, fmt.Sprintf("--load.rate=%v", rate))
	passive := exportertest.Start(t, c.AdminConfig(), "--namespace="+testNS, "--load.rate=0",
		"--quiet.name=watchcache-quiet-passive", "--apiservers="+b.URL(), "--apiserver.history-window=135s")
	// Ready: their setup (klog's flags among it) is done before this
	// test's own clients run beside them.
	loaded.WaitReady(t, 30*time.Second)
	passive.WaitReady(t, 30*time.Second)

	// The capacity metric's name and labels in this version.
	capName, capLabels := capacityMetric(t, ctx, a)
	capacity := func(s *testcluster.APIServer) float64 {
		v, err := s.MetricValue(ctx, capName, map[string]string{"resource": "configmaps"})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	var samples []sample
	start := time.Now()
	for time.Since(start) < run {
		l, p := loaded.Scrape(t), passive.Scrape(t)
		samples = append(samples, sample{
			at:            time.Now(),
			writes:        l.Value(t, "watchcache_load_writes_total", "result", "ok"),
			windowA:       l.Value(t, "watchcache_window_seconds", "apiserver", idA, "resource", "configmaps"),
			windowVA:      l.Value(t, "watchcache_window_resource_versions", "apiserver", idA, "resource", "configmaps"),
			predictA:      l.Value(t, "watchcache_predicted_window_seconds", "apiserver", idA),
			capacityA:     capacity(a),
			capacityB:     capacity(b),
			passiveB:      p.Value(t, "watchcache_window_seconds", "apiserver", idB, "resource", "configmaps"),
			predictB:      p.Value(t, "watchcache_predicted_window_seconds", "apiserver", idB),
			expiryA:       metricOr(l, "watchcache_expiry_last_seconds", "apiserver", idA),
			firstBookmark: metricOr(l, "watchcache_first_bookmark_last_seconds", "apiserver", idA),
		})
		time.Sleep(2 * time.Second)
	}

	// The 410 and its O, from a watch of RV 1 on A, against the exporter's
	// oldest RV read just before and after. The exporter reads O once per
	// probe interval (1 s), so O may be ahead of it by what the load writes
	// in a couple of intervals.
	before := loaded.Scrape(t).Value(t, "watchcache_oldest_resource_version", "apiserver", idA, "resource", "configmaps")
	msg := watchFromRV1(t, ctx, a)
	after := loaded.Scrape(t).Value(t, "watchcache_oldest_resource_version", "apiserver", idA, "resource", "configmaps")
	ref := collector.ParseRefusal(msg)
	t.Logf("watch from RV 1: %q; the exporter's oldest RV %v before, %v after", msg, before, after)
	if ref.Source != collector.SourceWatchCache || ref.Requested != 1 || ref.Oldest == 0 {
		t.Errorf("410 message %q parsed as %+v: want the watch cache's \"too old resource version: 1 (O)\"", msg, ref)
	} else if o := float64(ref.Oldest); o < before || o > after+3*rate {
		t.Errorf("410 names O = %v, the exporter's oldest RV went from %v to %v (3 s of writes: %v)", o, before, after, 3*rate)
	}

	// The last 20 s.
	var last []sample
	end := samples[len(samples)-1]
	for _, s := range samples {
		if s.at.After(end.at.Add(-20 * time.Second)) {
			last = append(last, s)
		}
	}
	first := last[0]
	achieved := (end.writes - first.writes) / end.at.Sub(first.at).Seconds()
	windowA := exportertest.Median(last, func(s sample) float64 { return s.windowA })
	predictA := exportertest.Median(last, func(s sample) float64 { return s.predictA })
	passiveB := exportertest.Median(last, func(s sample) float64 { return s.passiveB })
	predictB := exportertest.Median(last, func(s sample) float64 { return s.predictB })
	capA, capB := end.capacityA, end.capacityB
	t.Logf("%s: %.2f writes/s; A: capacity %v, window %.2f s (capacity/rate %.2f s, predicted %.2f s), %v RVs; B (--request-timeout=2m): capacity %v, passive window %.2f s (capacity/rate %.2f s, predicted %.2f s); first BOOKMARK %.2f s; time to first 410 %.2f s",
		version, achieved, capA, windowA, capA/achieved, predictA, end.windowVA, capB, passiveB, capB/achieved, predictB, end.firstBookmark, end.expiryA)

	// The sizing rules: capacity the smallest 100·2^k of at least
	// window·rate, 75 s by default and --request-timeout + 15 s above it.
	if want := sizedCapacity(75, rate); capA != want {
		t.Errorf("A: capacity %v at %v writes/s, the 75 s rule gives %v", capA, rate, want)
	}
	if want := sizedCapacity(135, rate); capB != want {
		t.Errorf("B (--request-timeout=2m): capacity %v at %v writes/s, the 135 s rule gives %v", capB, rate, want)
	}
	if !exportertest.Within(windowA, capA/achieved, 0.05) || !exportertest.Within(windowA, predictA, 0.05) {
		t.Errorf("A: window %.2f s, capacity/rate %.2f s, predicted %.2f s: more than 5%% apart", windowA, capA/achieved, predictA)
	}
	if !exportertest.Within(passiveB, capB/achieved, 0.05) || !exportertest.Within(passiveB, predictB, 0.05) {
		t.Errorf("B: passive window %.2f s, capacity/rate %.2f s, predicted %.2f s: more than 5%% apart", passiveB, capB/achieved, predictB)
	}
	if !exportertest.Within(end.windowVA, capA, 0.02) {
		t.Errorf("A: window %v RVs, capacity %v: more than 2%% apart", end.windowVA, capA)
	}
	// Bookmarks every minute; the first 410 within a probe interval of
	// the window (the probe interval is 1 s).
	if end.firstBookmark < 55 || end.firstBookmark > 65 {
		t.Errorf("first BOOKMARK after %.2f s, want about 60 s", end.firstBookmark)
	}
	if math.IsNaN(end.expiryA) || math.Abs(end.expiryA-capA/achieved) > 0.05*capA/achieved+1 {
		t.Errorf("time to first 410 %.2f s, capacity/rate %.2f s", end.expiryA, capA/achieved)
	}
	return fmt.Sprintf("| %s | `%s{%s}` | %.1f | %v / %.2f = %.2f | %.2f | %.2f | %v / %.2f = %.2f | %.2f | %.2f | `%s` |",
		version, capName, strings.Join(capLabels, ","), end.firstBookmark, capA, achieved, capA/achieved, windowA, end.expiryA,
		capB, achieved, capB/achieved, passiveB, predictB, strings.Replace(msg, fmt.Sprint(ref.Oldest), "O", 1))
}

// capacityMetric finds the watch cache capacity gauge among the names it
// has had, and its label names.
func capacityMetric(t *testing.T, ctx context.Context, a *testcluster.APIServer) (string, []string) {
	t.Helper()
	fams, err := a.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"watch_cache_capacity", "apiserver_watch_cache_capacity"} {
		f, ok := fams[name]
		if !ok || len(f.GetMetric()) == 0 {
			continue
		}
		var labels []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		slices.Sort(labels)
		return name, labels
	}
	t.Fatal("no watch cache capacity metric in the apiserver's /metrics")
	return "", nil
}

// watchFromRV1 opens a ConfigMap watch from RV 1 on a and returns the
// message of the 410 it must end with.
func watchFromRV1(t *testing.T, ctx context.Context, a *testcluster.APIServer) string {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(a.AdminConfig())
	w, err := cs.CoreV1().ConfigMaps(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{ResourceVersion: "1"})
	if err != nil {
		// Not how v1.37 answers (HTTP 200, then an ERROR event), but
		// what the message says matters.
		if st, ok := err.(apierrors.APIStatus); ok && st.Status().Code == 410 {
			return st.Status().Message
		}
		t.Fatal(err)
	}
	defer w.Stop()
	select {
	case ev := <-w.ResultChan():
		st, ok := ev.Object.(*metav1.Status)
		if ev.Type != watch.Error || !ok || st.Code != 410 {
			t.Fatalf("watch from RV 1: first event %s %T, want an ERROR with a 410 Status", ev.Type, ev.Object)
		}
		return st.Message
	case <-time.After(30 * time.Second):
		t.Fatal("watch from RV 1: no event in 30 s")
	}
	return ""
}

// sizedCapacity is the capacity the apiserver settles at for one writer at
// rate: the smallest 100·2^k of at least window·rate.
func sizedCapacity(window, rate float64) float64 {
	c := 100.0
	for c < window*rate {
		c *= 2
	}
	return c
}

func metricOr(m exportertest.Metrics, name string, labelPairs ...string) float64 {
	v, err := m.Get(name, labelPairs...)
	if err != nil {
		return math.NaN()
	}
	return v
}
