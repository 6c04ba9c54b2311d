package kind_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/yaml"

	"github.com/watchcache/watchcache-exporter/experiment"
	"github.com/watchcache/watchcache-exporter/test/arrivals"
	"github.com/watchcache/watchcache-exporter/test/e2e"
	"github.com/watchcache/watchcache-exporter/test/exportertest"
	"github.com/watchcache/watchcache-exporter/test/kind"
	"github.com/watchcache/watchcache-exporter/test/promtest"
	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

func TestMain(m *testing.M) { os.Exit(exportertest.Main(m)) }

// TestUserPath walks the operator's path on a kind cluster of the node
// image: the image loaded into the node as `kind load image-archive` does;
// a Prometheus Operator with a Prometheus that selects by a release label, as
// kube-prometheus-stack's; the chart installed with Helm under a release name
// other than the chart's, scraped and its rules loaded by that Prometheus,
// and uninstalled; `kubectl watchcache experiment` on the cluster's own
// kubeconfig context.
func TestUserPath(t *testing.T) {
	root := e2e.Root(t)
	bin, archive := kind.Files(t)
	c, ec := kind.StartWithImage(t, bin, archive)

	t.Run("beside a Prometheus Operator, as kube-prometheus-stack's", func(t *testing.T) {
		// The stack's release name, which its Prometheus selects by.
		const stack, ns = "kps", "wce-helm"
		prom := c.PrometheusOperator(t, bin, stack)
		labels := map[string]any{"release": stack}
		r := e2e.InstallRelease(t, ec, archive, "probe", ns, map[string]any{
			"serviceMonitor": map[string]any{"enabled": true, "additionalLabels": labels},
			"prometheusRule": map[string]any{"enabled": true, "additionalLabels": labels},
		})
		promURL := fmt.Sprintf("http://127.0.0.1:%d", c.PortForward(t, "default", prom, 9090))
		waitQuery(t, promURL, fmt.Sprintf(`up{job="watchcache-exporter",namespace=%q} == 1`, ns), 3*time.Minute)
		// Every group of the chart's PrometheusRule is loaded.
		b, err := os.ReadFile(filepath.Join(root, "charts", "watchcache-exporter", "files", "rules.yml"))
		if err != nil {
			t.Fatal(err)
		}
		var file struct{ Groups []struct{ Name string } }
		if err := yaml.Unmarshal(b, &file); err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, g := range file.Groups {
			want = append(want, g.Name)
		}
		var got []string
		deadline := time.Now().Add(2 * time.Minute)
		for {
			got = ruleGroups(t, promURL, ns+"-"+r.Name)
			if slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) || time.Now().After(deadline) {
				break
			}
			time.Sleep(2 * time.Second)
		}
		if !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
			t.Errorf("rule groups loaded from the PrometheusRule: %v, want the chart's %v", got, want)
		}
		// The window through that Prometheus is the exporter's own.
		pods, err := c.CS.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + r.Name})
		if err != nil || len(pods.Items) != 1 {
			t.Fatalf("the exporter's pods: %d (%v)", len(pods.Items), err)
		}
		exporter := fmt.Sprintf("http://127.0.0.1:%d/metrics", c.PortForward(t, ns, pods.Items[0].Name, 9890))
		query := fmt.Sprintf(`watchcache_window_seconds{namespace=%q,resource="configmaps"}`, ns)
		waitQuery(t, promURL, query, 4*time.Minute)
		for try := 1; ; try++ {
			own := scrape(t, exporter, "watchcache_window_seconds", "resource", "configmaps")
			seen := waitQuery(t, promURL, query, time.Minute)
			t.Logf("window %.2f s in Prometheus, %.2f s on the exporter's /metrics", seen, own)
			if math.Abs(seen-own) <= 0.01*own {
				break
			}
			// A cycle may end between the scrape and the read.
			if try == 3 {
				t.Errorf("window %.2f s in Prometheus, %.2f s on the exporter's /metrics: not within 1%%", seen, own)
				break
			}
			time.Sleep(20 * time.Second)
		}
		upgradeRate(t, c, ec, r, 30)
		r.UninstallLeavesNothing(t, ec)
	})

	t.Run("kubectl watchcache experiment on the cluster's context", func(t *testing.T) {
		const ns = "wce-experiment"
		if _, err := c.CS.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// kind names the context kind-<cluster>; the plugin is found by
		// kubectl on $PATH, and reads $KUBECONFIG as kubectl does.
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(t.Context(), ec.Kubectl, "watchcache", "experiment", "--context=kind-"+c.Name, "-n", ns,
			"--load.rate=85", "--output=json", "--timeout=5m")
		cmd.Env = append(os.Environ(), "PATH="+exportertest.PluginPath(t), exportertest.ChildEnv, "KUBECONFIG="+c.Kubeconfig)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		if err := cmd.Run(); err != nil {
			t.Fatalf("kubectl watchcache experiment: %v\nstderr:\n%s\nstdout:\n%s", err, stderr.String(), stdout.String())
		}
		var r experiment.Report
		if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
			t.Fatalf("the JSON report does not parse: %v\n%s", err, stdout.String())
		}
		capacity := apiserverCapacity(t, c)
		if r.Namespace != ns || len(r.APIServers) != 1 || len(r.APIServers[0].Cycles) != 1 || r.TimedOut {
			t.Fatalf("want one apiserver with one cycle in %s, not timed out: %s", ns, stdout.String())
		}
		cy := r.APIServers[0].Cycles[0]
		t.Logf("ran %s: %d events in the cache, the apiserver's capacity %v; %.1f s to the 410", time.Since(start).Round(time.Second), cy.EventsInCache, capacity, cy.SecondsTo410)
		// Within 0.3%: the writes in flight as the 410 arrived.
		if math.Abs(float64(cy.EventsInCache)-capacity) > 0.003*capacity {
			t.Errorf("events in the cache %d, the apiserver's capacity %v", cy.EventsInCache, capacity)
		}
		left := ec.Leftovers(t, e2e.Marks)
		for _, o := range left {
			t.Errorf("left after the experiment: %s", o)
		}
	})
}

// upgradeRate upgrades the release to another load rate: at no moment two
// exporters (the chart's Recreate strategy and the Lease), and the new pod's
// window is the cache's capacity over the rate the test's own watch counts
// in it, the capacity grown for the new rate.
func upgradeRate(t *testing.T, c *kind.Cluster, ec e2e.Cluster, r e2e.Release, rate float64) {
	t.Helper()
	ctx, ns := t.Context(), r.Namespace
	instance := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + r.Name}
	old, err := c.CS.CoreV1().Pods(ns).List(ctx, instance)
	if err != nil || len(old.Items) != 1 {
		t.Fatalf("the exporter's pods before the upgrade: %d (%v)", len(old.Items), err)
	}
	before := apiserverCapacity(t, c)
	events := arrivals.ConfigMaps(t, c.Config)

	// Every change of the exporter's pods and of its Lease, in order.
	type change struct {
		pod, lease string // the pod that changed, or the Lease's holder
		stopped    bool   // the pod was deleted or its containers ended
	}
	var (
		mu      sync.Mutex
		changes []change
	)
	record := func(x change) { mu.Lock(); changes = append(changes, x); mu.Unlock() }
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	pw, err := c.CS.CoreV1().Pods(ns).Watch(wctx, metav1.ListOptions{LabelSelector: instance.LabelSelector, ResourceVersion: old.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	lw, err := c.CS.CoordinationV1().Leases(ns).Watch(wctx, metav1.ListOptions{FieldSelector: "metadata.name=" + e2e.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for ev := range pw.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				// Recreate starts the new pod once the old one's phase is
				// terminal, before its object is deleted.
				stopped := ev.Type == watch.Deleted || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
				record(change{pod: p.Name, stopped: stopped})
			}
		}
	}()
	go func() {
		defer wg.Done()
		for ev := range lw.ResultChan() {
			if l, ok := ev.Object.(*coordinationv1.Lease); ok {
				record(change{lease: e2e.Holder(l)})
			}
		}
	}()

	start := time.Now()
	r.Upgrade(t, r.Name, map[string]any{"exporter": map[string]any{"loadRate": rate}})
	var pod string
	for {
		l, err := c.CS.CoordinationV1().Leases(ns).Get(ctx, e2e.Quiet, metav1.GetOptions{})
		if err == nil && e2e.Holder(l) != "" && e2e.Holder(l) != old.Items[0].Name {
			pod = e2e.Holder(l)
			break
		}
		if time.Since(start) > 3*time.Minute {
			t.Fatalf("no new holder of the Lease 3 minutes after helm upgrade: %v", err)
		}
		time.Sleep(time.Second)
	}
	t.Logf("helm upgrade %s to %v writes/s: %s leads %s after it began", r.Name, rate, pod, time.Since(start).Round(100*time.Millisecond))
	stop()
	pw.Stop()
	lw.Stop()
	wg.Wait()
	// The new pod and the Lease's new holder only once the old pod has
	// stopped, and no third.
	oldStopped := false
	for _, x := range changes {
		switch {
		case x.stopped && x.pod == old.Items[0].Name:
			oldStopped = true
		case x.pod != "" && x.pod != old.Items[0].Name && x.pod != pod:
			t.Fatalf("a third exporter pod during the upgrade: %s", x.pod)
		case x.pod == pod && !oldStopped:
			t.Fatalf("pod %s existed before %s stopped", pod, old.Items[0].Name)
		case x.pod == "" && x.lease != "" && x.lease != old.Items[0].Name && x.lease != pod:
			t.Fatalf("the Lease held by %s during the upgrade", x.lease)
		case x.pod == "" && x.lease == pod && !oldStopped:
			t.Fatalf("the Lease held by %s before %s stopped", pod, old.Items[0].Name)
		}
	}
	e2e.OwnedByServiceAccount(t, c.CS, ns, r.ServiceAccount)

	// The window follows the new rate once the cache has grown for it and
	// the new pod's RV clock reaches back past the cache's oldest event.
	exporter := fmt.Sprintf("http://127.0.0.1:%d/metrics", c.PortForward(t, ns, pod, 9890))
	deadline := time.Now().Add(6 * time.Minute)
	var capacity float64
	var steadySince time.Time
	for {
		if time.Now().After(deadline) {
			t.Fatalf("6 minutes after helm upgrade: capacity %v (before %v), the window not yet measured at %v writes/s", capacity, before, rate)
		}
		time.Sleep(5 * time.Second)
		if now := apiserverCapacity(t, c); now != capacity {
			capacity, steadySince = now, time.Now()
		}
		if scrape(t, exporter, "watchcache_load_target_writes_per_second", "", "") != rate ||
			scrape(t, exporter, "watchcache_window_lower_bound", "resource", "configmaps") != 0 {
			continue
		}
		at := time.Now()
		window := scrape(t, exporter, "watchcache_window_seconds", "resource", "configmaps")
		// The capacity unchanged for a whole window: the cache is steady.
		if math.IsNaN(window) || at.Sub(steadySince).Seconds() < window {
			continue
		}
		counted := events.Rate(at, window)
		t.Logf("at %v writes/s: window %.2f s, capacity %v (before the upgrade %v) over %.2f ConfigMap events/s counted in the window: %.2f s",
			rate, window, capacity, before, counted, capacity/counted)
		if !exportertest.Within(window, capacity/counted, 0.05) {
			t.Errorf("window %.2f s, capacity/rate %v/%.2f = %.2f s: more than 5%% apart", window, capacity, counted, capacity/counted)
		}
		if capacity <= before {
			t.Errorf("the cache's capacity %v at %v writes/s, %v before: it did not grow", capacity, rate, before)
		}
		return
	}
}

// apiserverCapacity is the kind apiserver's watch_cache_capacity of
// ConfigMaps.
func apiserverCapacity(t *testing.T, c *kind.Cluster) float64 {
	t.Helper()
	v, err := testcluster.Value(c.APIServerMetrics(t), "watch_cache_capacity", map[string]string{"resource": "configmaps"})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitQuery waits until query returns one series with a value, and
// returns it.
func waitQuery(t *testing.T, url, query string, timeout time.Duration) float64 {
	t.Helper()
	start := time.Now()
	for {
		var r struct {
			Data struct {
				Result []struct {
					Value [2]any `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		resp, err := http.Get(url + "/api/v1/query?query=" + neturl.QueryEscape(query))
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
		}
		if err == nil && len(r.Data.Result) == 1 {
			if s, ok := r.Data.Result[0].Value[1].(string); ok {
				if v, err := strconv.ParseFloat(s, 64); err == nil {
					return v
				}
			}
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s: no single series %s after %s (%v, %d series)", url, query, timeout, err, len(r.Data.Result))
		}
		time.Sleep(2 * time.Second)
	}
}

// ruleGroups are the names of the rule groups Prometheus loaded from the
// rule files whose name holds file.
func ruleGroups(t *testing.T, url, file string) []string {
	t.Helper()
	var r struct {
		Groups []struct{ Name, File string } `json:"groups"`
	}
	if err := json.Unmarshal(promtest.Server{Base: url}.Get(t, "/api/v1/rules", nil), &r); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range r.Groups {
		if strings.Contains(g.File, file) {
			names = append(names, g.Name)
		}
	}
	return names
}

// scrape reads one sample, selected by a label if one is given, from an exporter's /metrics.
func scrape(t *testing.T, url, name, label, value string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var labels map[string]string
	if label != "" {
		labels = map[string]string{label: value}
	}
	v, err := testcluster.Value(fams, name, labels)
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	return v
}
