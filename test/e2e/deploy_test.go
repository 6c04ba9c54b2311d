package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/watchcache/watchcache-exporter/monitoring"
	"github.com/watchcache/watchcache-exporter/test/e2e"
	"github.com/watchcache/watchcache-exporter/test/exportertest"
	"github.com/watchcache/watchcache-exporter/test/kind"
	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

func TestMain(m *testing.M) { os.Exit(exportertest.Main(m)) }

// TestDeployOverlay deploys deploy/ (the base with the prometheus-operator,
// APF, discovery and resources components) from the image `make image`
// built onto a kind cluster (test/kind; its own package, so that it runs
// beside test/kind's own test), scrapes it with a Prometheus in the cluster
// through Kubernetes service discovery (deploy/examples/kubernetes-sd),
// restarts the apiserver, replaces the pod, and deletes it all again.
func TestDeployOverlay(t *testing.T) {
	root := e2e.Root(t)
	bin, archive := kind.Files(t)
	c, ec := kind.StartWithImage(t, bin, archive)
	c.MonitoringCRDs(t, bin, "servicemonitors", "prometheusrules")
	rules, err := os.ReadFile(filepath.Join(root, "monitoring", "rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	prom := c.Prometheus(t, bin, prometheusConfig(t, root), map[string]string{"rules.yml": string(rules)})
	overlay := e2e.Overlay(t, e2e.ImageTag(t, archive), "prometheus-operator", "apf", "discovery", "resources")

	d := ec.Apply(t, overlay)
	applied := time.Now().Add(-d.Ready)
	pod := d.Pod.Name
	t.Logf("pod %s Ready %s after kubectl apply", pod, d.Ready.Round(10*time.Millisecond))

	// Found by service discovery, with the ServiceMonitor's labels.
	up := prom.WaitFor(t, fmt.Sprintf(`up{job="watchcache-exporter",pod=%q} == 1`, pod), 2*time.Minute)
	for k, v := range map[string]string{"namespace": e2e.Namespace, "service": "watchcache-exporter", "container": "watchcache-exporter", "endpoint": "metrics"} {
		if up.Metric[k] != v {
			t.Errorf("target label %s=%q, want %q (labels %v)", k, up.Metric[k], v, up.Metric)
		}
	}
	if want := d.Pod.Status.PodIP + ":9890"; up.Metric["instance"] != want {
		t.Errorf("instance %q, want the pod's %s", up.Metric["instance"], want)
	}
	// --apiservers=discover found the one apiserver in the real
	// kubernetes EndpointSlice, at the node's address.
	nodeIP := c.NodeIP(t)
	if vals := prom.LabelValues(t, "apiserver", fmt.Sprintf(`watchcache_window_seconds{pod=%q}`, pod)); len(vals) != 1 || !strings.Contains(vals[0], nodeIP) {
		t.Errorf("apiservers measured: %v, want the one at %s", vals, nodeIP)
	}

	bm := prom.WaitFor(t, fmt.Sprintf(`watchcache_first_bookmark_last_seconds{pod=%q} > 0`, pod), 4*time.Minute)
	t.Logf("first BOOKMARK in Prometheus %s after kubectl apply: %.1f s after its watch opened", time.Since(applied).Round(time.Second), bm.Float())
	ex := prom.WaitFor(t, fmt.Sprintf(`watchcache_expiry_last_seconds{pod=%q} > 0`, pod), 8*time.Minute)
	t.Logf("first 410 in Prometheus %s after kubectl apply: %.1f s from the RV to its 410", time.Since(applied).Round(time.Second), ex.Float())
	if window := prom.WaitFor(t, fmt.Sprintf(`watchcache_window_seconds{pod=%q,resource="configmaps"}`, pod), time.Minute); window.Float() <= 0 {
		t.Errorf("window %v s", window.Float())
	}
	// The resources component: its ClusterRole lets the pod measure the
	// leases the kubelet renews and count the pods, itself among them.
	leases := prom.WaitFor(t, fmt.Sprintf(`watchcache_window_seconds{pod=%q,resource="leases"} > 0`, pod), time.Minute)
	pods := prom.WaitFor(t, fmt.Sprintf(`watchcache_resource_objects{pod=%q,resource="pods"} >= 1`, pod), time.Minute)
	t.Logf("leases' window %.1f s (lower bound %v), %v pods counted", leases.Float(),
		prom.WaitFor(t, fmt.Sprintf(`watchcache_window_lower_bound{pod=%q,resource="leases"}`, pod), time.Minute).Float(), pods.Float())

	// The load's patches went through the APF component's FlowSchema, as
	// the apiserver counts them.
	if v, err := testcluster.Value(c.APIServerMetrics(t), "apiserver_flowcontrol_dispatched_requests_total", map[string]string{"flow_schema": "watchcache-exporter"}); err != nil || v == 0 {
		t.Errorf("requests dispatched through FlowSchema watchcache-exporter: %v (%v)", v, err)
	}

	// An apiserver restart gives the error and relist panels data; the pod
	// reconnects through the Service.
	c.RestartAPIServer(t, 2*time.Minute)
	// Port-forwards go through the apiserver and end with it.
	prom = c.PrometheusForward(t)
	prom.WaitFor(t, fmt.Sprintf(`increase(watchcache_cache_resets_total{pod=%q}[5m]) > 0`, pod), 3*time.Minute)
	prom.WaitFor(t, fmt.Sprintf(`up{pod=%q} == 1 and on() (time() - max(watchcache_last_probe_success_timestamp_seconds{pod=%q}) < 60)`, pod, pod), 3*time.Minute)
	// Every dashboard query returns series once the restart's counters
	// have two samples in Grafana's rate interval (1m at a 15 s scrape
	// interval), a counter born at the restart too.
	vars := strings.NewReplacer("$__rate_interval", "1m", "$job", "watchcache-exporter", "$instance", ".+", "$apiserver", ".+", "$resource", ".+")
	pending := map[int]string{}
	for i, q := range monitoring.DashboardQueries() {
		if !strings.Contains(q, "$apiserver_job") { // this Prometheus does not scrape the apiserver; TestArticleOnRealPrometheus's does
			pending[i] = q
		}
	}
	for deadline := time.Now().Add(2 * time.Minute); len(pending) > 0; time.Sleep(5 * time.Second) {
		for i, q := range pending {
			if len(prom.Query(t, vars.Replace(q))) > 0 {
				delete(pending, i)
			}
		}
		if time.Now().After(deadline) {
			// A restart of 4 s can fall between two of the exporter's
			// requests (warm run 5): then there is no error to show.
			noErrors := len(prom.Query(t, fmt.Sprintf(`watchcache_exporter_api_errors_total{pod=%q}`, pod))) == 0
			for i, q := range pending {
				if noErrors && strings.Contains(q, "watchcache_exporter_api_errors_total") {
					t.Logf("dashboard query %d: no series, the exporter met no error during the restart: %s", i, q)
					continue
				}
				t.Errorf("dashboard query %d returned no series 2 minutes after the restart: %s", i, q)
			}
			break
		}
	}

	h := ec.DeletePod(t, d.Pod)
	t.Logf("pod deleted: %s leads %s later", h.New.Name, h.Leading.Round(100*time.Millisecond))
	// The series go on, from the new pod.
	prom.WaitFor(t, fmt.Sprintf(`watchcache_window_seconds{pod=%q} > 0`, h.New.Name), 3*time.Minute)
	if res := prom.Query(t, `count(up{job="watchcache-exporter"} == 1)`); len(res) != 1 || res[0].Float() != 1 {
		t.Errorf("targets up after the handover: %v, want 1", res)
	}

	ec.Delete(t, overlay)
}

// prometheusConfig is deploy/examples/kubernetes-sd's scrape config, as a
// Prometheus in the cluster uses it, with the project's rules.
func prometheusConfig(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "deploy", "examples", "kubernetes-sd", "scrape-config.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var scrape []map[string]any
	if err := yaml.Unmarshal(b, &scrape); err != nil {
		t.Fatal(err)
	}
	cfg, err := yaml.Marshal(map[string]any{
		"global":         map[string]any{"scrape_interval": "15s", "evaluation_interval": "15s"},
		"rule_files":     []string{"/etc/prometheus/rules.yml"},
		"scrape_configs": scrape,
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(cfg)
}
