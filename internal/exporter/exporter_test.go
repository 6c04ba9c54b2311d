package exporter

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/watchcache/watchcache-exporter/internal/owned"
	"github.com/watchcache/watchcache-exporter/internal/testcluster"
)

const testNS = "watchcache-test"

// TestArticle reproduces the article on the real apiserver in one run at 85
// writes/s, and then restarts the apiserver under the exporter.
func TestArticle(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{})
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
		code, out := runToExit(t, saCfg, "--namespace="+testNS)
		if code != 1 || !strings.Contains(out, "RBAC denies create configmaps in namespace "+testNS+"; list configmaps in namespace "+testNS+" (watchcache-quiet); patch configmaps in namespace "+testNS+" (watchcache-quiet,watchcache-noise-0,") {
			t.Errorf("without RBAC: exit %d, output %q; want 1 and the denied verbs", code, out)
		}
		gone := rest.CopyConfig(c.AdminConfig())
		gone.Host = "https://127.0.0.1:1"
		code, out = runToExit(t, gone)
		if code != 1 || !strings.Contains(out, "apiserver https://127.0.0.1:1 unreachable") {
			t.Errorf("unreachable apiserver: exit %d, output %q; want 1 and the address", code, out)
		}
	})

	const rate = 85
	e := startExporter(t, c.AdminConfig(), "--namespace="+testNS, fmt.Sprintf("--load.rate=%d", rate))
	start := time.Now()
	var writesAtStart float64
	e.waitFor(t, 30*time.Second, "load flowing", func(m metrics) bool {
		writesAtStart = m.value(t, "watchcache_load_writes_total", "result", "ok")
		start = time.Now()
		return writesAtStart > 0
	})

	// The first cycle ends at the first 410 from its stale RV.
	var first metrics
	e.waitFor(t, 150*time.Second, "first expiry cycle", func(m metrics) bool {
		first = m
		return m.sum(t, "watchcache_expiry_cycles_total") >= 1
	})
	capacity := apiserverCapacity()
	elapsed := time.Since(start).Seconds()
	achieved := (first.value(t, "watchcache_load_writes_total", "result", "ok") - writesAtStart) / elapsed
	expiry := first.value(t, "watchcache_expiry_seconds_last")
	firstBookmark := first.value(t, "watchcache_first_bookmark_seconds_last")
	windowRVs := first.value(t, "watchcache_window_resource_versions")
	t.Logf("apiserver capacity %v; achieved %.2f writes/s over %.0f s; first BOOKMARK %.2f s; first 410 after %.2f s (capacity/rate %.2f s); distance %v; window %.2f s, %v RVs",
		capacity, achieved, elapsed, firstBookmark, expiry, capacity/achieved,
		first.value(t, "watchcache_stale_rv_distance_last"), first.value(t, "watchcache_window_seconds"), windowRVs)

	if firstBookmark < 55 || firstBookmark > 65 {
		t.Errorf("first BOOKMARK after %.2f s, want 55..65 s", firstBookmark)
	}
	if expiry < 75 {
		t.Errorf("first 410 after %.2f s, want at least 75 s", expiry)
	}
	if want := capacity / achieved; math.Abs(expiry-want) > 2 {
		t.Errorf("first 410 after %.2f s, want within 2 s of capacity/rate = %v/%.2f = %.2f s", expiry, capacity, achieved, want)
	}
	if n := first.value(t, "watchcache_expiry_cycles_total", "bookmark_result", "ok"); n != 1 {
		t.Errorf("reconnect from the latest BOOKMARK at the first 410: %v cycles with result ok, want 1 (%v)", n, first.samples("watchcache_expiry_cycles_total", "bookmark_result"))
	}
	if math.Abs(windowRVs-capacity) > 0.01*capacity {
		t.Errorf("window_resource_versions %v, want within 1%% of the capacity %v", windowRVs, capacity)
	}
	if math.Abs(achieved-rate) > 0.03*rate {
		t.Errorf("achieved %.2f writes/s, want within 3%% of %d", achieved, rate)
	}
	if d := first.value(t, "watchcache_stale_rv_distance_last"); d <= 0 {
		t.Errorf("stale_rv_distance_last %v at a 410, want > 0", d)
	}

	// The plain watcher sees the touches of quiet and nothing else.
	e.waitFor(t, 10*time.Second, "plain watcher to see every touch", func(m metrics) bool {
		return m.value(t, "watchcache_watch_events_total", "watcher", "plain", "type", "MODIFIED") == m.value(t, "watchcache_quiet_touches_total")
	})
	if s := e.scrape(t).samples("watchcache_watch_events_total", "watcher"); len(s["plain"]) != 1 {
		t.Errorf("plain watcher events by type: %v, want MODIFIED only", s["plain"])
	}

	// An apiserver restart: every RV the exporter holds is refused at once.
	before := e.scrape(t)
	if err := c.APIServer().Restart(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitFor(t, 60*time.Second, "relists of both watchers and a new cycle after the restart", func(m metrics) bool {
		return m.value(t, "watchcache_relists_total", "watcher", "plain") > before.value(t, "watchcache_relists_total", "watcher", "plain") &&
			m.value(t, "watchcache_relists_total", "watcher", "bookmarks") > before.value(t, "watchcache_relists_total", "watcher", "bookmarks") &&
			m.value(t, "watchcache_quiet_touches_total") > before.value(t, "watchcache_quiet_touches_total")
	})
	e.waitFor(t, 30*time.Second, "readiness after the restart", func(metrics) bool { return e.ready() })

	// A graceful stop deletes what the exporter made.
	if code := e.stop(t); code != 0 {
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

// exporter is Run() in this process, serving on a free loopback port.
type exporter struct {
	url    string
	cancel context.CancelFunc
	done   chan int
	logs   *syncBuffer
}

func startExporter(t *testing.T, cfg *rest.Config, args ...string) *exporter {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := testcluster.WriteKubeconfig(kubeconfig, cfg); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	e := &exporter{url: "http://" + addr, cancel: cancel, done: make(chan int, 1), logs: &syncBuffer{}}
	args = append([]string{"--kubeconfig=" + kubeconfig, "--web.listen-address=" + addr, "--log.format=text"}, args...)
	go func() { e.done <- Run(ctx, args, io.Discard, e.logs) }()
	t.Cleanup(func() {
		e.stop(t)
		if t.Failed() {
			t.Logf("exporter log:\n%s", e.logs.String())
		}
	})
	e.waitFor(t, 30*time.Second, "exporter ready", func(metrics) bool { return e.ready() })
	return e
}

// stop cancels run's context, as SIGTERM does, and returns its exit status.
func (e *exporter) stop(t *testing.T) int {
	e.cancel()
	select {
	case code := <-e.done:
		e.done <- code
		return code
	case <-time.After(30 * time.Second):
		t.Fatal("exporter did not stop within 30 s")
		return -1
	}
}

func (e *exporter) ready() bool {
	resp, err := http.Get(e.url + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (e *exporter) scrape(t *testing.T) metrics {
	t.Helper()
	m, err := e.tryScrape()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (e *exporter) tryScrape() (metrics, error) {
	resp, err := http.Get(e.url + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// waitFor scrapes every half second until cond holds.
func (e *exporter) waitFor(t *testing.T, timeout time.Duration, what string, cond func(metrics) bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		select {
		case code := <-e.done:
			e.done <- code
			t.Fatalf("exporter exited with status %d while waiting for %s", code, what)
		default:
		}
		m, err := e.tryScrape()
		if err == nil && cond(m) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %s (last scrape error: %v)", what, timeout, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

type metrics map[string]*dto.MetricFamily

// value is the one sample of name with the label pairs given.
func (m metrics) value(t *testing.T, name string, labelPairs ...string) float64 {
	t.Helper()
	want := map[string]string{}
	for i := 0; i+1 < len(labelPairs); i += 2 {
		want[labelPairs[i]] = labelPairs[i+1]
	}
	v, err := testcluster.Value(m, name, want)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// sum adds every sample of a counter or gauge family.
func (m metrics) sum(t *testing.T, name string) float64 {
	t.Helper()
	fam, ok := m[name]
	if !ok {
		t.Fatalf("metric %s not exposed", name)
	}
	s := 0.0
	for _, x := range fam.GetMetric() {
		s += x.GetCounter().GetValue() + x.GetGauge().GetValue()
	}
	return s
}

// samples groups the nonzero samples of a family by the value of one label,
// then by the other labels, for assertions on sets and for messages.
func (m metrics) samples(name, by string) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for _, x := range m[name].GetMetric() {
		v := x.GetCounter().GetValue() + x.GetGauge().GetValue()
		if v == 0 {
			continue
		}
		var key string
		var rest []string
		for _, l := range x.GetLabel() {
			if l.GetName() == by {
				key = l.GetValue()
			} else {
				rest = append(rest, l.GetName()+"="+l.GetValue())
			}
		}
		if out[key] == nil {
			out[key] = map[string]float64{}
		}
		out[key][strings.Join(rest, ",")] = v
	}
	return out
}

func runToExit(t *testing.T, cfg *rest.Config, args ...string) (int, string) {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := testcluster.WriteKubeconfig(kubeconfig, cfg); err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	code := Run(ctx, append([]string{"--kubeconfig=" + kubeconfig, "--web.listen-address=127.0.0.1:0"}, args...), io.Discard, &out)
	return code, out.String()
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
