package monitoring

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/watchcache/watchcache-exporter/test/browser"
	"github.com/watchcache/watchcache-exporter/test/exportertest"
	"github.com/watchcache/watchcache-exporter/test/promtest"
	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

// Passive measurement of two more resources, for the resource panels.
var resourcesFlags = [2]string{"--resources=pods,leases.coordination.k8s.io", "--resources.interval=2s"}

// startPrometheus scrapes the exporter at addr and the apiserver with two
// real Prometheus servers, Debian's 2.42 and the module's 3.x (native
// histograms on in each), evaluating the rules every second.
func startPrometheus(t *testing.T, c *testcluster.Cluster, addr string) []promtest.Server {
	t.Helper()
	rules, err := filepath.Abs("rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: watchcache-exporter
    static_configs:
      - targets: [%q]
  # As kube-prometheus-stack's apiserver job, for the panels that need it.
  - job_name: apiserver
    scheme: https
    tls_config: {ca_file: %q}
    authorization: {credentials: %q}
    static_configs:
      - targets: [%q]
`, rules, addr, c.CAFile(), c.AdminConfig().BearerToken, strings.TrimPrefix(c.APIServer().URL(), "https://"))
	var proms []promtest.Server
	for _, b := range promtest.Servers(t) {
		proms = append(proms, promtest.StartBinary(t, b.Path, cfg))
	}
	return proms
}

// checkDashboards runs every dashboard query, variable and recording rule
// through each server's HTTP API: each must return series on all of them.
// The run must have had a first BOOKMARK and a first 410.
func checkDashboards(t *testing.T, proms []promtest.Server) {
	t.Helper()
	for _, prom := range proms {
		prom.WaitFor(t, `max(watchcache_first_bookmark_last_seconds) > 0 and max(watchcache_expiry_last_seconds) > 0`, 3*time.Minute)
	}
	time.Sleep(5 * time.Second) // a few more scrapes for rate()

	dash, err := Dashboard()
	if err != nil {
		t.Fatal(err)
	}
	for _, prom := range proms {
		// Native histograms are on in each version: the histograms are
		// stored as native ones only, which the quantile panels must read.
		if res := prom.Query(t, `histogram_count(rate(watchcache_load_write_duration_seconds[1m]))`); len(res) == 0 {
			t.Errorf("Prometheus %s: no native histogram stored", prom.Version)
		}
		if res := prom.Query(t, `watchcache_load_write_duration_seconds_bucket`); len(res) != 0 {
			t.Errorf("Prometheus %s: classic buckets stored beside the native histogram", prom.Version)
		}
		for i, q := range DashboardQueries() {
			if res := prom.Query(t, variables.Replace(q)); len(res) == 0 {
				t.Errorf("Prometheus %s: dashboard query %d returned no series: %s", prom.Version, i, q)
			}
		}
		for _, v := range dash.Templating.List {
			if v.Definition == nil {
				continue
			}
			// label_values(selector, label)
			inner := strings.TrimSuffix(strings.TrimPrefix(*v.Definition, "label_values("), ")")
			i := strings.LastIndex(inner, ",")
			selector, label := strings.TrimSpace(variables.Replace(inner[:i])), strings.TrimSpace(inner[i+1:])
			if vals := prom.LabelValues(t, label, selector); len(vals) == 0 {
				t.Errorf("Prometheus %s: variable %s: no values of %s in %s", prom.Version, v.Name, label, selector)
			}
		}
		// The recording rules evaluate to something too.
		for _, g := range Rules().Groups {
			for _, r := range g.Rules {
				if r.Record != "" && !strings.Contains(r.Expr, "[1h]") && !strings.Contains(r.Expr, "[10m]") {
					if len(prom.Query(t, r.Record)) == 0 {
						t.Errorf("Prometheus %s: recording rule %s has no series", prom.Version, r.Record)
					}
				}
			}
		}
	}
}

// TestDocsPictures draws docs/status-page.png and docs/panels.png from a
// 7-minute run whose rate steps up and whose apiserver restarts 15 s in, so
// that the pictures show the window and the prediction following it. It runs only when asked
// (WATCHCACHE_UPDATE_DOCS=1): the pictures are not a check, and
// TestArticleOnRealPrometheus runs the same queries and page.
func TestDocsPictures(t *testing.T) {
	if os.Getenv(UpdateDocsEnv) != "1" {
		t.Skip("draws the docs' pictures only with " + UpdateDocsEnv + "=1")
	}
	c := testcluster.Start(t, testcluster.Options{})
	admin := kubernetes.NewForConfigOrDie(c.AdminConfig())
	if _, err := admin.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "watchcache"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	exp := exportertest.StartReady(t, c.AdminConfig(), "--namespace=watchcache", "--load.schedule=40:150s,100:10m", resourcesFlags[0], resourcesFlags[1])
	proms := startPrometheus(t, c, exp.Addr)
	start := time.Now()
	// A restart 15 s in: the window starts again from zero.
	time.Sleep(15 * time.Second)
	if err := c.APIServer().Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(start.Add(7 * time.Minute)))
	browser.CheckStatusPage(t, exp.Addr, filepath.Join("..", "docs", "status-page.png"))
	plotPanels(t, proms[0], start, time.Now())
}
