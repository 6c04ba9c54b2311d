package kind

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/watchcache/watchcache-exporter/test/promtest"
)

// kubectl runs bin's kubectl against the cluster with stdin.
func (c *Cluster) kubectl(t *testing.T, bin string, stdin []byte, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// MonitoringCRDs creates the Prometheus Operator's CRDs of the given
// resources (their plural names), as its module holds them, and waits until
// they are served.
func (c *Cluster) MonitoringCRDs(t *testing.T, bin string, resources ...string) {
	t.Helper()
	// create, not apply: the Prometheus CRD is larger than the annotation
	// client-side apply keeps.
	create, wait := []string{"create"}, []string{"wait", "--for=condition=Established", "--timeout=1m"}
	for _, r := range resources {
		create = append(create, "-f", filepath.Join(bin, "prometheus-operator", "crd", "monitoring.coreos.com_"+r+".yaml"))
		wait = append(wait, "crd/"+r+".monitoring.coreos.com")
	}
	c.kubectl(t, bin, nil, create...)
	c.kubectl(t, bin, nil, wait...)
}

// prometheusAccount loads the Prometheus image into the node and creates the
// ServiceAccount prometheus in the default namespace with the Prometheus
// Operator's example ClusterRole: what Kubernetes service discovery reads.
func (c *Cluster) prometheusAccount(t *testing.T, bin string) {
	t.Helper()
	dir := filepath.Join(bin, "prometheus-operator")
	c.LoadImageArchive(t, filepath.Join(dir, "images", "prometheus.tar"))
	for _, f := range []string{"prometheus-service-account", "prometheus-cluster-role", "prometheus-cluster-role-binding"} {
		c.kubectl(t, bin, nil, "create", "-f", filepath.Join(dir, "rbac", f+".yaml"))
	}
}

const prometheusPod = "prometheus"

// Prometheus runs the project's Prometheus 3 in the cluster, without the
// operator, as the pod prometheus in the default namespace with config (a
// prometheus.yml) and files beside it in /etc/prometheus, and returns it
// through a port-forward.
func (c *Cluster) Prometheus(t *testing.T, bin, config string, files map[string]string) promtest.Server {
	t.Helper()
	c.prometheusAccount(t, bin)
	ctx := t.Context()
	data := map[string]string{"prometheus.yml": config}
	for k, v := range files {
		data[k] = v
	}
	if _, err := c.CS.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus"}, Data: data}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := prometheusPod
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod},
		Spec: corev1.PodSpec{
			ServiceAccountName: "prometheus",
			SecurityContext:    &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65534), FSGroup: ptr.To[int64](65534)},
			Containers: []corev1.Container{{
				Name:            "prometheus",
				Image:           PromImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"/bin/prometheus", "--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus", "--web.listen-address=:9090"},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/-/ready", Port: intstr.FromInt32(9090)}},
					PeriodSeconds: 2},
				VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/prometheus"}, {Name: "data", MountPath: "/prometheus"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "prometheus"}}}},
				{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
	if _, err := c.CS.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		p, err := c.CS.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
		if err == nil && podReady(p) {
			t.Logf("Prometheus %s Ready %s after it was created", pod, time.Since(start).Round(100*time.Millisecond))
			break
		}
		if time.Since(start) > 3*time.Minute {
			t.Fatalf("%s not Ready 3 minutes after it was created (%v): %+v", pod, err, p.Status)
		}
		time.Sleep(time.Second)
	}
	return c.PrometheusForward(t)
}

// PrometheusForward is the Prometheus that Prometheus started, through a new
// port-forward.
func (c *Cluster) PrometheusForward(t *testing.T) promtest.Server {
	t.Helper()
	return promtest.Server{Base: fmt.Sprintf("http://127.0.0.1:%d", c.PortForward(t, "default", prometheusPod, 9090))}
}
