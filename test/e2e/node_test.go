package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/watchcache/watchcache-exporter/monitoring"
	"github.com/watchcache/watchcache-exporter/test/e2e"
	"github.com/watchcache/watchcache-exporter/test/promtest"
	"github.com/watchcache/watchcache-exporter/test/testcluster"
	"github.com/watchcache/watchcache-exporter/test/testnode"
)

// TestLocalNode deploys deploy/ (the base with the prometheus-operator, APF
// and discovery components) from the image `make image` built onto the
// local node, scrapes it with Prometheus through Kubernetes service
// discovery, replaces the pod, and deletes it all again.
func TestLocalNode(t *testing.T) {
	testcluster.Real(t)
	root := e2e.Root(t)
	bin := filepath.Join(root, "bin")
	archive := filepath.Join(bin, "watchcache-exporter-image.tar")
	crds := filepath.Join(bin, "crds")
	// Debian's Prometheus has no Kubernetes service discovery: this one is
	// built from the module by hack/prometheus.
	promBin := filepath.Join(bin, "prometheus")
	for _, need := range []string{archive, filepath.Join(crds, "monitoring.coreos.com_servicemonitors.yaml"), filepath.Join(bin, "kubectl"), promBin} {
		if _, err := os.Stat(need); err != nil {
			testcluster.Missing(t, need+" is missing; make e2e builds it (make image, make node-bin)")
		}
	}
	testnode.Run(t, testnode.Options{BinDir: bin, Images: []string{archive}}, func(t *testing.T, n *testnode.Node) {
		ctx := t.Context()
		c := e2e.Cluster{
			Kubectl:    filepath.Join(bin, "kubectl"),
			Kubeconfig: n.Kubeconfig,
			Config:     n.Cluster.AdminConfig(),
			CS:         kubernetes.NewForConfigOrDie(n.Cluster.AdminConfig()),
		}
		c.Run(t, "apply", "-f", crds)
		c.Run(t, "wait", "--for=condition=Established", "--timeout=1m",
			"crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com")
		overlay := e2e.Overlay(t, e2e.ImageTag(t, archive), "prometheus-operator", "apf", "discovery", "resources")
		prom := promtest.StartBinary(t, promBin, prometheusConfig(t, root, n.Kubeconfig))

		d := c.Apply(t, overlay)
		applied := time.Now().Add(-d.Ready)
		pod := d.Pod.Name
		t.Logf("pod %s Ready %s after kubectl apply (node Ready %s after the kubelet started)", pod, d.Ready.Round(10*time.Millisecond), n.Ready.Round(10*time.Millisecond))

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
		if vals := prom.LabelValues(t, "apiserver", fmt.Sprintf(`watchcache_window_seconds{pod=%q}`, pod)); len(vals) != 1 || !strings.Contains(vals[0], testnode.NodeIP) {
			t.Errorf("apiservers measured: %v, want the one at %s", vals, testnode.NodeIP)
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

		// The load's patches went through the APF component's FlowSchema,
		// as the apiserver counts them.
		fams, err := n.Cluster.APIServer().Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if v, err := testcluster.Value(fams, "apiserver_flowcontrol_dispatched_requests_total", map[string]string{"flow_schema": "watchcache-exporter"}); err != nil || v == 0 {
			t.Errorf("requests dispatched through FlowSchema watchcache-exporter: %v (%v)", v, err)
		}

		// An apiserver restart gives the error and relist panels data; the
		// pod reconnects through the Service.
		restartCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err = n.Cluster.APIServer().Restart(restartCtx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		prom.WaitFor(t, fmt.Sprintf(`increase(watchcache_cache_resets_total{pod=%q}[5m]) > 0`, pod), 3*time.Minute)
		prom.WaitFor(t, fmt.Sprintf(`up{pod=%q} == 1 and on() (time() - max(watchcache_last_probe_success_timestamp_seconds{pod=%q}) < 60)`, pod, pod), 3*time.Minute)
		// Two samples of the restart's counters in Grafana's rate interval
		// (1m at a 15 s scrape interval), for increase() to have a value.
		prom.WaitFor(t, fmt.Sprintf(`count_over_time(watchcache_watch_restarts_total{pod=%q}[1m]) >= 2`, pod), 2*time.Minute)
		vars := strings.NewReplacer("$__rate_interval", "1m", "$job", "watchcache-exporter", "$instance", ".+", "$apiserver", ".+", "$resource", ".+")
		for i, q := range monitoring.DashboardQueries() {
			if strings.Contains(q, "$apiserver_job") {
				continue // this Prometheus does not scrape the apiserver; TestArticleOnRealPrometheus's does
			}
			if res := prom.Query(t, vars.Replace(q)); len(res) == 0 {
				t.Errorf("dashboard query %d returned no series: %s", i, q)
			}
		}

		h := c.DeletePod(t, d.Pod)
		t.Logf("pod deleted: %s leads %s later", h.New.Name, h.Leading.Round(100*time.Millisecond))
		// The series go on, from the new pod.
		prom.WaitFor(t, fmt.Sprintf(`watchcache_window_seconds{pod=%q} > 0`, h.New.Name), 3*time.Minute)
		if res := prom.Query(t, fmt.Sprintf(`count(up{job="watchcache-exporter"} == 1)`)); len(res) != 1 || res[0].Float() != 1 {
			t.Errorf("targets up after the handover: %v, want 1", res)
		}

		c.Delete(t, overlay)
	})
}

// prometheusConfig is deploy/examples/kubernetes-sd's scrape config, given
// the node's kubeconfig, with the project's rules.
func prometheusConfig(t *testing.T, root, kubeconfig string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "deploy", "examples", "kubernetes-sd", "scrape-config.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var scrape []map[string]any
	if err := yaml.Unmarshal(b, &scrape); err != nil {
		t.Fatal(err)
	}
	for _, sc := range scrape {
		for _, sd := range sc["kubernetes_sd_configs"].([]any) {
			sd.(map[string]any)["kubeconfig_file"] = kubeconfig
		}
	}
	cfg, err := yaml.Marshal(map[string]any{
		"global":         map[string]any{"scrape_interval": "15s", "evaluation_interval": "15s"},
		"rule_files":     []string{filepath.Join(root, "monitoring", "rules.yml")},
		"scrape_configs": scrape,
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(cfg)
}
