package kind_test

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchcache/watchcache-exporter/experiment"
	"github.com/watchcache/watchcache-exporter/test/e2e"
	"github.com/watchcache/watchcache-exporter/test/exportertest"
	"github.com/watchcache/watchcache-exporter/test/kind"
	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

func TestMain(m *testing.M) { os.Exit(exportertest.Main(m)) }

// TestUserPath walks the operator's path on a kind cluster of the node
// image: the image loaded into the node as `kind load image-archive` does,
// the chart installed and uninstalled with Helm under a release name other
// than the chart's, and `kubectl watchcache experiment` on the cluster's own
// kubeconfig context.
func TestUserPath(t *testing.T) {
	testcluster.Real(t)
	root := e2e.Root(t)
	bin := filepath.Join(root, "bin")
	archive := filepath.Join(bin, "watchcache-exporter-image.tar")
	crds := filepath.Join(bin, "prometheus-operator", "crd")
	for _, need := range []string{archive, filepath.Join(crds, "monitoring.coreos.com_servicemonitors.yaml"), filepath.Join(bin, "kubectl")} {
		if _, err := os.Stat(need); err != nil {
			testcluster.Missing(t, need+" is missing; make kind-image image builds it")
		}
	}
	c := kind.Start(t, kind.Config(true), 2)
	c.WaitSystemPods(t, 3*time.Minute)
	c.LoadImageArchive(t, archive)
	ec := e2e.Cluster{Kubectl: filepath.Join(bin, "kubectl"), Kubeconfig: c.Kubeconfig, Config: c.Config, CS: c.CS}
	ec.Run(t, "create", "-f", filepath.Join(crds, "monitoring.coreos.com_servicemonitors.yaml"), "-f", filepath.Join(crds, "monitoring.coreos.com_prometheusrules.yaml"))
	ec.Run(t, "wait", "--for=condition=Established", "--timeout=1m",
		"crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com")

	t.Run("helm install and uninstall", func(t *testing.T) {
		e2e.HelmInstallUninstall(t, ec, archive)
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
		raw, err := c.CS.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		capacity, err := testcluster.Value(fams, "watch_cache_capacity", map[string]string{"resource": "configmaps"})
		if err != nil {
			t.Fatal(err)
		}
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
