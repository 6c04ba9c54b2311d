//go:build kind

// Package kind runs the exporter in a real kind cluster, deployed from
// deploy/ as a user would: make kind-e2e. It needs a Docker engine and
// skips, saying so, where none answers.
package kind

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"

	"github.com/watchcache/watchcache-exporter/test/e2e"
)

const (
	clusterName = "watchcache-e2e"
	image       = "ghcr.io/watchcache/watchcache-exporter:e2e"
	ns          = e2e.Namespace
)

func TestKind(t *testing.T) {
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("no Docker engine answers (docker info: %v: %s); the kind end-to-end run needs one", err, bytes.TrimSpace(out))
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	run := func(dir, name string, args ...string) []byte {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return out
	}
	run(root, "docker", "build", "-t", image, ".")

	provider := cluster.NewProvider(cluster.ProviderWithDocker())
	if err := provider.Create(clusterName, cluster.CreateWithWaitForReady(3*time.Minute)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := provider.Delete(clusterName, ""); err != nil {
			t.Errorf("delete kind cluster: %v", err)
		}
	})
	nodes, err := provider.ListInternalNodes(clusterName)
	if err != nil {
		t.Fatal(err)
	}
	archive := run(root, "docker", "save", image)
	for _, n := range nodes {
		if err := nodeutils.LoadImageArchive(n, bytes.NewReader(archive)); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig, err := provider.KubeConfig(clusterName, false)
	if err != nil {
		t.Fatal(err)
	}
	kcPath := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kcPath, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kcPath)
	if err != nil {
		t.Fatal(err)
	}
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatal(err)
	}
	// The checks of the local-node run (test/e2e), but for Prometheus,
	// which cannot reach kind's pods from the host: a port-forward reads
	// the first BOOKMARK instead.
	c := e2e.Cluster{Kubectl: kubectl, Kubeconfig: kcPath, Config: cfg, CS: kubernetes.NewForConfigOrDie(cfg)}
	overlay := e2e.Overlay(t, "e2e", "apf", "discovery")
	d := c.Apply(t, overlay)
	t.Logf("pod %s Ready %s after kubectl apply", d.Pod.Name, d.Ready)
	cs := c.CS
	pod := d.Pod
	tr, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	url := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod.Name).SubResource("portforward").URL()
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.New(spdy.NewDialer(upgrader, &http.Client{Transport: tr}, http.MethodPost, url), []string{"0:9890"}, stop, ready, nil, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	go fw.ForwardPorts()
	<-ready
	ports, err := fw.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	// A first BOOKMARK comes about 60 s after the bookmark watch opened.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	for firstBookmarks(t, ports[0].Local) < 1 {
		select {
		case <-ctx.Done():
			t.Fatal("no first BOOKMARK recorded within 3 minutes")
		case <-time.After(5 * time.Second):
		}
	}
	close(stop)
	h := c.DeletePod(t, d.Pod)
	t.Logf("pod deleted: %s leads %s later", h.New.Name, h.Leading)
	c.Delete(t, overlay)
}

func firstBookmarks(t *testing.T, port uint16) float64 {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, m := range fams["watchcache_first_bookmark_seconds"].GetMetric() {
		total += float64(m.GetHistogram().GetSampleCount())
	}
	return total
}
