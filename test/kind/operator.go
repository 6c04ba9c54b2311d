package kind

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The images of the Prometheus Operator's parts that make kind-image builds,
// with the versions of their modules.
const (
	OperatorImage = "localhost/watchcache-exporter/prometheus-operator:v0.85.0"
	ReloaderImage = "localhost/watchcache-exporter/prometheus-config-reloader:v0.85.0"
	PromImage     = "localhost/watchcache-exporter/prometheus:v3.16.0"
	PromVersion   = "v3.16.0"
)

// PrometheusOperator runs the Prometheus Operator and one Prometheus in the
// default namespace, from the operator's own example RBAC and Deployment,
// and returns the Prometheus pod's name. The Prometheus selects
// ServiceMonitors, PodMonitors and PrometheusRules labelled release=release in
// every namespace, as kube-prometheus-stack's does with its defaults.
func (c *Cluster) PrometheusOperator(t *testing.T, bin, release string) string {
	t.Helper()
	dir := filepath.Join(bin, "prometheus-operator")
	for _, a := range []string{"operator", "prometheus-config-reloader"} {
		c.LoadImageArchive(t, filepath.Join(dir, "images", a+".tar"))
	}
	c.prometheusAccount(t, bin)
	c.MonitoringCRDs(t, bin, "prometheuses", "servicemonitors", "podmonitors", "probes", "prometheusrules")

	for _, f := range []string{"prometheus-operator-service-account", "prometheus-operator-cluster-role", "prometheus-operator-cluster-role-binding",
		"prometheus-operator-service"} {
		c.kubectl(t, bin, nil, "create", "-f", filepath.Join(dir, "rbac", f+".yaml"))
	}
	// The example Deployment with this project's images; no kubelet Service
	// (the tests scrape no kubelet).
	b, err := os.ReadFile(filepath.Join(dir, "rbac", "prometheus-operator-deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var dep map[string]any
	if err := yaml.Unmarshal(b, &dep); err != nil {
		t.Fatal(err)
	}
	ctr := dep["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	ctr["image"] = OperatorImage
	ctr["args"] = []any{"--kubelet-service=", "--prometheus-config-reloader=" + ReloaderImage}
	if b, err = yaml.Marshal(dep); err != nil {
		t.Fatal(err)
	}
	c.kubectl(t, bin, b, "create", "-f", "-")

	match := map[string]any{"matchLabels": map[string]any{"release": release}}
	prom := map[string]any{
		"apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
		"metadata": map[string]any{"name": "prometheus", "namespace": "default"},
		"spec": map[string]any{
			"image": PromImage, "version": PromVersion, "imagePullPolicy": "IfNotPresent",
			"serviceAccountName": "prometheus", "scrapeInterval": "15s", "evaluationInterval": "15s",
			"serviceMonitorSelector": match, "serviceMonitorNamespaceSelector": map[string]any{},
			"podMonitorSelector": match, "podMonitorNamespaceSelector": map[string]any{},
			"ruleSelector": match, "ruleNamespaceSelector": map[string]any{},
			"securityContext": map[string]any{"runAsNonRoot": true, "runAsUser": 1000, "runAsGroup": 2000, "fsGroup": 2000},
		},
	}
	if b, err = yaml.Marshal(prom); err != nil {
		t.Fatal(err)
	}
	// The operator's webhook-free validation accepts it once its CRD is
	// served; the operator then makes the StatefulSet.
	c.kubectl(t, bin, b, "create", "-f", "-")
	const pod = "prometheus-prometheus-0"
	start := time.Now()
	for {
		p, err := c.CS.CoreV1().Pods("default").Get(t.Context(), pod, metav1.GetOptions{})
		if err == nil && podReady(p) {
			t.Logf("Prometheus %s Ready %s after its object was created", pod, time.Since(start).Round(100*time.Millisecond))
			return pod
		}
		if time.Since(start) > 3*time.Minute {
			pods, _ := c.CS.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{})
			var b strings.Builder
			for _, p := range pods.Items {
				fmt.Fprintf(&b, "%s: %s %+v\n", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
			}
			t.Fatalf("%s not Ready 3 minutes after the Prometheus object was created (%v):\n%s", pod, err, b.String())
		}
		time.Sleep(time.Second)
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
