package deploy_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/watchcache/watchcache-exporter/test/promtest"
)

// The alerts that select a job fire for the chart under any release name and
// namespace: the job Prometheus gives its targets (the ServiceMonitor's
// jobLabel, read off the Service) is the one the rendered rules select.
// promtool runs the rendered rules on series of that job.
func TestChartAlertsUnderAnyReleaseName(t *testing.T) {
	bins := promtest.Promtools(t)
	for _, tc := range []struct{ release, namespace, values, job string }{
		{"obs", "monitoring", "", "watchcache-exporter"},
		{"wce", "team-a", "nameOverride: cachewatch", "cachewatch"},
	} {
		t.Run(tc.release, func(t *testing.T) {
			objs, err := renderRelease(t, tc.release, tc.namespace, "serviceMonitor: {enabled: true}\nprometheusRule: {enabled: true}\n"+tc.values)
			if err != nil {
				t.Fatal(err)
			}
			svc := find[corev1.Service](t, objs, "Service")
			sm := find[monitoringv1.ServiceMonitor](t, objs, "ServiceMonitor")
			rule := find[monitoringv1.PrometheusRule](t, objs, "PrometheusRule")
			job := svc.Name // the operator's job without a jobLabel
			if l := sm.Spec.JobLabel; l != "" {
				job = svc.Labels[l]
			}
			if job != tc.job || job == svc.Name {
				t.Fatalf("Prometheus's job for Service %s is %q, want %q (not the Service's name, which has the release in it)", svc.Name, job, tc.job)
			}
			rules, err := yaml.Marshal(rule.Spec)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "rules.yml"), rules, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "test.yml"), []byte(fmt.Sprintf(jobAlertsTest, job)), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, bin := range bins {
				cmd := exec.Command(bin.Path, "test", "rules", "test.yml")
				cmd.Dir = dir
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("promtool %s test rules: %v\n%s", bin.Name, err, out)
				}
			}
		})
	}
}

// jobAlertsTest: a target of the job (%[1]s) that stops answering fires
// WatchCacheExporterDown; a Prometheus without one fires
// WatchCacheExporterAbsent.
const jobAlertsTest = `rule_files: [rules.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'up{job="%[1]s",instance="10.0.0.9:9890"}'
        values: '1x5 0x20'
    alert_rule_test:
      - eval_time: 12m
        alertname: WatchCacheExporterDown
        exp_alerts:
          - exp_labels: {severity: warning, job: %[1]s, instance: "10.0.0.9:9890"}
            exp_annotations:
              summary: "Prometheus cannot scrape watchcache-exporter."
              description: "The watch cache history is not measured."
              runbook_url: "https://github.com/watchcache/watchcache-exporter/blob/main/docs/runbooks.md#watchcacheexporterdown"
      - eval_time: 20m
        alertname: WatchCacheExporterAbsent
        exp_alerts: []
  - interval: 1m
    input_series:
      - series: 'up{job="something-else",instance="10.0.0.8:9100"}'
        values: '1x30'
    alert_rule_test:
      - eval_time: 20m
        alertname: WatchCacheExporterAbsent
        exp_alerts:
          - exp_labels: {severity: warning, job: %[1]s}
            exp_annotations:
              summary: "Prometheus has no watchcache-exporter to scrape."
              description: "No target of the exporter's job: the Deployment is gone or scaled to 0, or service discovery does not find its Service (ServiceMonitor selector, namespace, or a job name other than the Service's app.kubernetes.io/name label)."
              runbook_url: "https://github.com/watchcache/watchcache-exporter/blob/main/docs/runbooks.md#watchcacheexporterabsent"
`
