package monitoring

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/watchcache/watchcache-exporter/internal/exportertest"
	"github.com/watchcache/watchcache-exporter/internal/testcluster"
)

// TestDashboardQueriesOnRealPrometheus runs the exporter against the real
// control plane, scrapes it with a real Prometheus (native histograms on),
// restarts the apiserver once so that the error, relist and expiry panels
// have something to show, and runs every dashboard query through
// Prometheus' HTTP API: each must return series.
func TestDashboardQueriesOnRealPrometheus(t *testing.T) {
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		promtool(t) // skips or fails with the install hint
		t.Fatal("promtool found but not prometheus")
	}
	c := testcluster.Start(t, testcluster.Options{})
	ctx := t.Context()
	admin := kubernetes.NewForConfigOrDie(c.AdminConfig())
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "watchcache"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	load := "--load.rate=85"
	docs := os.Getenv(UpdateDocsEnv) == "1"
	if docs {
		// A longer run for the pictures: a rate step up shows the window
		// and the prediction following it.
		load = "--load.schedule=40:150s,100:10m"
	}
	exp := exportertest.Start(t, c.AdminConfig(), "--namespace=watchcache", load)
	prom := startPrometheus(t, promBin, exp)
	start := time.Now()

	// An apiserver restart: probes fail, watchers relist, the cycle's
	// stale RV is refused at once.
	time.Sleep(15 * time.Second)
	if err := c.APIServer().Restart(ctx); err != nil {
		t.Fatal(err)
	}
	// The first BOOKMARK comes ~60 s after the (re)opened bookmark watch.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if v := prom.query(t, `max(watchcache_first_bookmark_last_seconds) > 0 and max(watchcache_expiry_last_seconds) > 0`); len(v) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no BOOKMARK and expiry cycle in Prometheus within 3 minutes")
		}
		time.Sleep(2 * time.Second)
	}
	time.Sleep(5 * time.Second) // a few more scrapes for rate()

	for i, q := range DashboardQueries() {
		res := prom.query(t, variables.Replace(q))
		if len(res) == 0 {
			t.Errorf("dashboard query %d returned no series: %s", i, q)
		}
	}
	for _, v := range Dashboard()["templating"].(obj)["list"].([]obj) {
		def, ok := v["definition"].(string)
		if !ok {
			continue
		}
		// label_values(selector, label)
		inner := strings.TrimSuffix(strings.TrimPrefix(def, "label_values("), ")")
		i := strings.LastIndex(inner, ",")
		selector, label := strings.TrimSpace(variables.Replace(inner[:i])), strings.TrimSpace(inner[i+1:])
		if vals := prom.labelValues(t, label, selector); len(vals) == 0 {
			t.Errorf("variable %s: no values of %s in %s", v["name"], label, selector)
		}
	}
	if docs {
		time.Sleep(time.Until(start.Add(7 * time.Minute)))
	}
	checkStatusPage(t, exp.Addr)
	if docs {
		plotPanels(t, prom, start, time.Now())
	}
	// The recording rules evaluate to something too.
	for _, g := range Rules().Groups {
		for _, r := range g.Rules {
			if r.Record != "" && !strings.Contains(r.Expr, "[1h]") && !strings.Contains(r.Expr, "[10m]") {
				if len(prom.query(t, r.Record)) == 0 {
					t.Errorf("recording rule %s has no series", r.Record)
				}
			}
		}
	}
}

type prometheusServer struct{ base string }

func startPrometheus(t *testing.T, bin string, exp *exportertest.Exporter) prometheusServer {
	t.Helper()
	dir := t.TempDir()
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
`, rules, exp.Addr)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := exportertest.FreeAddr(t)
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--enable-feature=native-histograms")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("prometheus log:\n%s", b)
		}
	})
	p := prometheusServer{base: "http://" + addr}
	for i := 0; ; i++ {
		resp, err := http.Get(p.base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if i > 150 {
			t.Fatalf("prometheus not ready: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (p prometheusServer) get(t *testing.T, path string, params url.Values) json.RawMessage {
	t.Helper()
	resp, err := http.Get(p.base + path + "?" + params.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if body.Status != "success" {
		t.Fatalf("%s %v: %s", path, params, body.Error)
	}
	return body.Data
}

func (p prometheusServer) query(t *testing.T, q string) []json.RawMessage {
	t.Helper()
	var data struct {
		Result []json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(p.get(t, "/api/v1/query", url.Values{"query": {q}}), &data); err != nil {
		t.Fatal(err)
	}
	return data.Result
}

func (p prometheusServer) labelValues(t *testing.T, label, selector string) []string {
	t.Helper()
	var vals []string
	if err := json.Unmarshal(p.get(t, "/api/v1/label/"+label+"/values", url.Values{"match[]": {selector}}), &vals); err != nil {
		t.Fatal(err)
	}
	return vals
}
