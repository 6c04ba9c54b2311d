// Package accuracy holds the tests of the exporter's window against the real
// apiserver's own figures across a schedule of rates. The article's run at
// 85 writes/s is in monitoring (TestArticleOnRealPrometheus), where the same
// run serves the dashboards' check.
package accuracy_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/watchcache/watchcache-exporter/apiservers"
	"github.com/watchcache/watchcache-exporter/test/arrivals"
	"github.com/watchcache/watchcache-exporter/test/exportertest"
	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

const testNS = "watchcache-test"

// sample is one look at both exporters and both apiservers.
type sample struct {
	at                  time.Time
	target              float64
	writes              float64 // load_writes_total{result="ok"}
	window, predicted   float64 // apiserver A, load exporter
	capacityA           float64
	windowB, capacityB  float64
	passiveB, predictB  float64 // the passive exporter's view of B
	estimatedA, windowV float64
}

// TestWindowAgainstRate runs a 40 -> 100 -> 40 writes/s schedule against two
// apiservers on one etcd: A with the default 75 s history window, B with
// --request-timeout=2m (135 s). A passive exporter watches B at the same
// time. At the end of each step the measured window must match the model
// and the apiserver's own capacity/rate, the falling step must show the
// larger window (hysteresis), and restarting B must reset only B's window.
func TestWindowAgainstRate(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	ctx := t.Context()
	b, err := c.AddAPIServer(ctx, "--request-timeout=2m")
	if err != nil {
		t.Fatal(err)
	}
	a := c.APIServer()
	admin := kubernetes.NewForConfigOrDie(c.AdminConfig())
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
	steps := []struct {
		rate float64
		dur  time.Duration
	}{{40, 3 * time.Minute}, {100, 3 * time.Minute}, {40, 4 * time.Minute}}
	var sched []string
	for _, s := range steps {
		sched = append(sched, fmt.Sprintf("%v:%s", s.rate, s.dur))
	}
	// Every ConfigMap write, as the test's own watch receives it.
	configMapEvents := arrivals.ConfigMaps(t, c.AdminConfig())
	loaded := exportertest.StartReady(t, c.AdminConfig(), "--namespace="+testNS,
		"--apiservers="+list, "--load.schedule="+strings.Join(sched, ","))
	passive := exportertest.StartReady(t, c.AdminConfig(), "--namespace="+testNS, "--load.rate=0",
		"--quiet.name=watchcache-quiet-passive", "--apiservers="+b.URL(), "--apiserver.history-window=135s")

	capacity := func(s *testcluster.APIServer) float64 {
		v, err := s.MetricValue(ctx, "watch_cache_capacity", map[string]string{"resource": "configmaps"})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	var total time.Duration
	for _, s := range steps {
		total += s.dur
	}
	var samples []sample
	start := time.Now()
	for time.Since(start) < total-5*time.Second {
		at := time.Now()
		l := loaded.Scrape(t)
		at = at.Add(time.Since(at) / 2) // when the load exporter's windows are compared with the watch's counts
		p := passive.Scrape(t)
		samples = append(samples, sample{
			at:         at,
			target:     l.Value(t, "watchcache_load_target_writes_per_second"),
			writes:     l.Value(t, "watchcache_load_writes_total", "result", "ok"),
			window:     l.Value(t, "watchcache_window_seconds", "apiserver", idA),
			windowV:    l.Value(t, "watchcache_window_resource_versions", "apiserver", idA),
			estimatedA: l.Value(t, "watchcache_estimated_capacity_events", "apiserver", idA),
			predicted:  l.Value(t, "watchcache_predicted_window_seconds", "apiserver", idA),
			capacityA:  capacity(a),
			windowB:    l.Value(t, "watchcache_window_seconds", "apiserver", idB),
			capacityB:  capacity(b),
			passiveB:   p.Value(t, "watchcache_window_seconds", "apiserver", idB),
			predictB:   p.Value(t, "watchcache_predicted_window_seconds", "apiserver", idB),
		})
		time.Sleep(2 * time.Second)
	}

	// The last 20 s of each step, as the exporter's target gauge tells them,
	// or its last three samples where a busy machine took fewer in 20 s.
	var ends []sample
	var stepWindows []float64
	for i, s := range steps {
		var step []sample
		for j, x := range samples {
			if x.target == s.rate && stepOf(samples, j) == i {
				step = append(step, x)
			}
		}
		if len(step) < 3 {
			t.Fatalf("step %d (%v writes/s): %d samples", i+1, s.rate, len(step))
		}
		end := step[len(step)-1]
		last := slices.DeleteFunc(slices.Clone(step), func(x sample) bool { return x.at.Before(end.at.Add(-20 * time.Second)) })
		if len(last) < 3 {
			last = step[len(step)-3:]
		}
		first := last[0]
		achieved := (end.writes - first.writes) / end.at.Sub(first.at).Seconds()
		window := exportertest.Median(last, func(x sample) float64 { return x.window })
		predicted := exportertest.Median(last, func(x sample) float64 { return x.predicted })
		capA := end.capacityA
		// The rate that filled the cache: the ConfigMap events the test's
		// watch received over the window itself.
		rate := configMapEvents.Rate(end.at, window)
		t.Logf("step %d: target %v writes/s, achieved %.2f in the last samples, %.2f ConfigMap events/s in the window; window %.2f s, predicted %.2f s, capacity %v (capacity/rate %.2f s), window %v RVs, estimated capacity %v; B: capacity %v, window %.2f s (passive exporter %.2f s, predicted %.2f s)",
			i+1, s.rate, achieved, rate, window, predicted, capA, capA/rate, end.windowV, end.estimatedA,
			end.capacityB, end.windowB, end.passiveB, end.predictB)
		if !exportertest.Within(window, predicted, 0.05) {
			t.Errorf("step %d: window %.2f s, predicted %.2f s: more than 5%% apart", i+1, window, predicted)
		}
		if !exportertest.Within(window, capA/rate, 0.05) {
			t.Errorf("step %d: window %.2f s, capacity/rate %v/%.2f = %.2f s: more than 5%% apart", i+1, window, capA, rate, capA/rate)
		}
		t.Logf("step %d: window %v RVs (%+.2f%%), estimated capacity %v (%+.2f%%) against the capacity %v",
			i+1, end.windowV, 100*(end.windowV-capA)/capA, end.estimatedA, 100*(end.estimatedA-capA)/capA, capA)
		// 0.3% at the end of the rising steps; after the fall the cache
		// is still shrinking, and the exporter's ring of own writes holds
		// a moment less than it.
		if tol := map[bool]float64{true: 0.003, false: 0.05}[i < 2]; !exportertest.Within(end.estimatedA, capA, tol) {
			t.Errorf("step %d: estimated capacity %v, apiserver's %v: more than %v%% apart", i+1, end.estimatedA, capA, 100*tol)
		}
		if end.windowB < 135 {
			t.Errorf("step %d: window of B (--request-timeout=2m) %.2f s, want at least 135 s", i+1, end.windowB)
		}
		// B's larger window takes longer than a step to fill at 100
		// writes/s and to settle after it; only the first step is steady.
		if rateB := configMapEvents.Rate(end.at, end.passiveB); i == 0 && !exportertest.Within(end.passiveB, end.capacityB/rateB, 0.05) {
			t.Errorf("step %d: passive exporter's window of B %.2f s, capacity/rate %v/%.2f = %.2f s: more than 5%% apart", i+1, end.passiveB, end.capacityB, rateB, end.capacityB/rateB)
		}
		if !exportertest.Within(end.passiveB, end.predictB, 0.05) {
			t.Errorf("step %d: passive exporter's window of B %.2f s, its prediction with a 135 s history window %.2f s: more than 5%% apart", i+1, end.passiveB, end.predictB)
		}
		ends = append(ends, end)
		stepWindows = append(stepWindows, window)
	}
	if !(stepWindows[2] > stepWindows[0]) {
		t.Errorf("hysteresis: falling step's window %.2f s is not larger than the rising step's %.2f s", stepWindows[2], stepWindows[0])
	}
	if !(ends[2].predicted > ends[0].predicted) {
		t.Errorf("the model did not predict the hysteresis: %.2f s after the fall, %.2f s before", ends[2].predicted, ends[0].predicted)
	}

	// Restarting B resets B's window only.
	if err := b.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	loaded.WaitFor(t, 60*time.Second, "B's window to restart", func(m exportertest.Metrics) bool {
		w := m.Value(t, "watchcache_window_seconds", "apiserver", idB)
		return w < 30
	})
	if w := loaded.Scrape(t).Value(t, "watchcache_window_seconds", "apiserver", idA); w < 100 {
		t.Errorf("A's window %.2f s after restarting B, want it untouched (> 100 s)", w)
	}
}

// stepOf numbers the runs of equal targets in samples: 0 for the first run.
func stepOf(samples []sample, j int) int {
	n := 0
	for i := 1; i <= j; i++ {
		if samples[i].target != samples[i-1].target {
			n++
		}
	}
	return n
}
