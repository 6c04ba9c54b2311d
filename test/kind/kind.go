// Package kind is the in-cluster harness: a one-node kind cluster on podman,
// from the node image hack/kind builds (make kind-image), created and deleted
// by the test that uses it, through kind's Go API. The cluster's network is
// the test's own podman network, deleted with it; a cluster or network that
// an interrupted run left is deleted by the next run before it starts.
package kind

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"
	kindexec "sigs.k8s.io/kind/pkg/exec"
	kindlog "sigs.k8s.io/kind/pkg/log"

	"github.com/watchcache/watchcache-exporter/test/e2e"
	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

// Prefix names every cluster and podman network of this harness.
const Prefix = "watchcache-e2e-"

// ImageFile is where make kind-image writes the node image's name.
const ImageFile = "kind-node-image"

// Config is the kind configuration the node image needs, for one node:
//   - no default CNI: the image has no kindnetd, and its bridge CNI config
//     serves one node;
//   - the kubelet started on a cgroup v1 host (this one is), which it refuses
//     by default since Kubernetes 1.35;
//   - with skipDNS, no CoreDNS: kubeadm's Corefile forwards every name
//     outside the cluster to the host's resolver (its loop check does at
//     once), and tests talk to no address they did not create. Nothing in
//     the tests resolves a name: clients find the apiserver by the
//     kubernetes Service's address.
func Config(skipDNS bool) *v1alpha4.Cluster {
	c := &v1alpha4.Cluster{
		TypeMeta:   v1alpha4.TypeMeta{Kind: "Cluster", APIVersion: "kind.x-k8s.io/v1alpha4"},
		Nodes:      []v1alpha4.Node{{Role: v1alpha4.ControlPlaneRole}},
		Networking: v1alpha4.Networking{DisableDefaultCNI: true},
		KubeadmConfigPatches: []string{`kind: KubeletConfiguration
failCgroupV1: false`},
	}
	if skipDNS {
		c.KubeadmConfigPatches = append(c.KubeadmConfigPatches, `kind: InitConfiguration
skipPhases: [preflight, addon/coredns]`)
	}
	return c
}

// Cluster is a running kind cluster.
type Cluster struct {
	Name       string
	Kubeconfig string
	Config     *rest.Config
	CS         kubernetes.Interface
	provider   *cluster.Provider
}

// ConfFile is podman's configuration for this host (hack/kind).
func ConfFile() (string, error) {
	root, err := testcluster.RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "hack", "kind", "containers.conf"), nil
}

// NodeImage is the node image make kind-image built, after checking that
// podman has it.
func NodeImage(t testing.TB) string {
	t.Helper()
	bin, err := testcluster.FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(bin, ImageFile))
	if err != nil {
		testcluster.Missing(t, "no kind node image ("+err.Error()+"); make kind-image builds it")
	}
	image := strings.TrimSpace(string(b))
	if out, err := podman(context.Background(), "image", "exists", image); err != nil {
		testcluster.Missing(t, fmt.Sprintf("podman has no %s (%v %s); make kind-image builds it", image, err, out))
	}
	return image
}

func podman(ctx context.Context, args ...string) ([]byte, error) {
	conf, err := ConfFile()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "podman", args...)
	cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+conf)
	return cmd.CombinedOutput()
}

// Start creates a one-node cluster from the node image with cfg, and
// deletes it and its network when t ends. It takes slots of the machine
// first (testcluster.TakeSlots): a node runs a whole control plane.
func Start(t *testing.T, cfg *v1alpha4.Cluster, slots int) *Cluster {
	t.Helper()
	testcluster.Real(t)
	if _, err := exec.LookPath("podman"); err != nil {
		testcluster.Missing(t, "podman is missing; make kind-image installs it (hack/kind/host.sh)")
	}
	image := NodeImage(t)
	conf, err := ConfFile()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(testcluster.TakeSlots(t, slots))
	// kind's podman provider runs podman with the process's environment.
	t.Setenv("CONTAINERS_CONF", conf)
	removeLeftovers(t)

	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	c := &Cluster{Name: Prefix + hex.EncodeToString(suffix), Kubeconfig: filepath.Join(t.TempDir(), "kubeconfig")}
	// Claimed before it exists, and released after its deletion (cleanups
	// run last in, first out), so that no other binary's removeLeftovers
	// takes it for a leftover.
	testcluster.Claim(t, c.Name)
	// A network of the test's own, which kind finds and uses, so that it
	// can be deleted with the cluster; kind keeps its default one.
	if out, err := podman(t.Context(), "network", "create", c.Name); err != nil {
		t.Fatalf("podman network create %s: %v\n%s", c.Name, err, out)
	}
	t.Setenv("KIND_EXPERIMENTAL_PODMAN_NETWORK", c.Name)
	var logs bytes.Buffer
	c.provider = cluster.NewProvider(cluster.ProviderWithPodman(), cluster.ProviderWithLogger(&logger{&logs}))
	t.Cleanup(func() {
		if err := c.provider.Delete(c.Name, c.Kubeconfig); err != nil {
			t.Errorf("delete kind cluster %s: %v", c.Name, err)
		}
		if out, err := podman(context.Background(), "network", "rm", c.Name); err != nil {
			t.Errorf("podman network rm %s: %v\n%s", c.Name, err, out)
		}
	})
	start := time.Now()
	err = c.provider.Create(c.Name, cluster.CreateWithV1Alpha4Config(cfg), cluster.CreateWithNodeImage(image),
		cluster.CreateWithKubeconfigPath(c.Kubeconfig), cluster.CreateWithWaitForReady(3*time.Minute),
		cluster.CreateWithDisplayUsage(false), cluster.CreateWithDisplaySalutation(false),
		// Kept on failure for its logs; the cleanup above deletes it.
		cluster.CreateWithRetain(true))
	if err != nil {
		var out []byte
		if re := kindexec.RunErrorForError(err); re != nil {
			out = re.Output
		}
		t.Fatalf("kind create cluster %s from %s: %v\n%s\n%s\nthe node's logs:\n%s", c.Name, image, err, out, logs.String(), c.nodeLogs())
	}
	t.Logf("kind cluster %s from %s created in %s", c.Name, image, time.Since(start).Round(100*time.Millisecond))
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	c.CS = kubernetes.NewForConfigOrDie(c.Config)
	return c
}

// Files checks that make kind-image image built what the kind tests need,
// and returns bin/ and the exporter's image archive in it.
func Files(t *testing.T) (bin, archive string) {
	t.Helper()
	testcluster.Real(t)
	bin = filepath.Join(e2e.Root(t), "bin")
	archive = filepath.Join(bin, "watchcache-exporter-image.tar")
	op := filepath.Join(bin, "prometheus-operator")
	for _, need := range []string{archive, filepath.Join(op, "crd", "monitoring.coreos.com_prometheuses.yaml"), filepath.Join(op, "images", "prometheus.tar"), filepath.Join(bin, "kubectl")} {
		if _, err := os.Stat(need); err != nil {
			testcluster.Missing(t, need+" is missing; make kind-image image builds it")
		}
	}
	return bin, archive
}

// StartWithImage starts a one-node cluster as Start does, waits until
// every kube-system pod is Ready, loads the exporter's image archive into
// it, and returns it also as an e2e.Cluster, for kubectl.
func StartWithImage(t *testing.T, bin, archive string) (*Cluster, e2e.Cluster) {
	t.Helper()
	// One slot: measured during TestDeployOverlay, the node's processes
	// took 9% of a core between its bursts (kubeadm, image loads, the
	// restart), less than a bare control plane at 20 writes/s (27%).
	c := Start(t, Config(true), 1)
	c.WaitSystemPods(t, 3*time.Minute)
	c.LoadImageArchive(t, archive)
	return c, e2e.Cluster{Kubectl: filepath.Join(bin, "kubectl"), Kubeconfig: c.Kubeconfig, Config: c.Config, CS: c.CS}
}

// nodeLogs is the end of the node's kubelet and containerd journals and its
// containers, for a failure's report.
func (c *Cluster) nodeLogs() string {
	node := c.Name + "-control-plane"
	var b strings.Builder
	for _, cmd := range [][]string{
		{"journalctl", "--no-pager", "-n", "60", "-u", "kubelet"},
		{"journalctl", "--no-pager", "-n", "30", "-u", "containerd"},
		{"ctr", "-n", "k8s.io", "containers", "ls"},
	} {
		out, err := podman(context.Background(), append([]string{"exec", node}, cmd...)...)
		fmt.Fprintf(&b, "$ %s (%v)\n%s\n", strings.Join(cmd, " "), err, out)
	}
	return b.String()
}

// removeLeftovers deletes the clusters and networks of this harness that a
// run killed before its cleanup left, sparing those another running test
// binary claimed (the kind tests live in more than one package).
func removeLeftovers(t *testing.T) {
	t.Helper()
	p := cluster.NewProvider(cluster.ProviderWithPodman())
	names, err := p.List()
	if err != nil {
		t.Fatalf("kind get clusters: %v", err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, Prefix) && !testcluster.Claimed(t, n) {
			t.Logf("deleting kind cluster %s, left by an earlier run", n)
			if err := p.Delete(n, ""); err != nil {
				t.Fatalf("delete kind cluster %s: %v", n, err)
			}
		}
	}
	out, err := podman(t.Context(), "network", "ls", "--format", "{{.Name}}")
	if err != nil {
		t.Fatalf("podman network ls: %v\n%s", err, out)
	}
	for n := range strings.FieldsSeq(string(out)) {
		if strings.HasPrefix(n, Prefix) && !testcluster.Claimed(t, n) {
			t.Logf("deleting podman network %s, left by an earlier run", n)
			if out, err := podman(t.Context(), "network", "rm", n); err != nil {
				t.Fatalf("podman network rm %s: %v\n%s", n, err, out)
			}
		}
	}
}

// WaitSystemPods waits until every pod in kube-system is Ready, and
// kube-proxy's among them.
func (c *Cluster) WaitSystemPods(t *testing.T, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		pods, err := c.CS.CoreV1().Pods("kube-system").List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ready, proxy := 0, false
		for _, p := range pods.Items {
			if podReady(&p) {
				ready++
				proxy = proxy || p.Labels["k8s-app"] == "kube-proxy"
			}
		}
		if proxy && ready == len(pods.Items) {
			t.Logf("%d pods Ready in kube-system %s after the cluster was created", ready, time.Since(start).Round(100*time.Millisecond))
			return
		}
		if time.Since(start) > timeout {
			for _, p := range pods.Items {
				t.Logf("%s: %s %+v", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
			}
			t.Fatalf("%d of %d pods Ready in kube-system (kube-proxy's: %v) after %s\n%s", ready, len(pods.Items), proxy, timeout, c.nodeLogs())
		}
		time.Sleep(time.Second)
	}
}

// Node is the cluster's one node.
func (c *Cluster) Node(t *testing.T) nodes.Node {
	t.Helper()
	ns, err := c.provider.ListInternalNodes(c.Name)
	if err != nil || len(ns) != 1 {
		t.Fatalf("nodes of %s: %v (%v)", c.Name, ns, err)
	}
	return ns[0]
}

// APIServerMetrics reads the kind apiserver's /metrics.
func (c *Cluster) APIServerMetrics(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	raw, err := c.CS.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// NodeIP is the node's InternalIP, where the apiserver listens.
func (c *Cluster) NodeIP(t *testing.T) string {
	t.Helper()
	ns, err := c.CS.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	if err != nil || len(ns.Items) != 1 {
		t.Fatalf("nodes of %s: %d (%v)", c.Name, len(ns.Items), err)
	}
	for _, a := range ns.Items[0].Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	t.Fatalf("node %s has no InternalIP: %v", ns.Items[0].Name, ns.Items[0].Status.Addresses)
	return ""
}

// RestartAPIServer kills the node's kube-apiserver, which the kubelet
// starts again from its static pod, and returns once the restarted
// apiserver reports itself ready. SIGKILL: after SIGTERM it answered again
// only about 68 s later here, past the exporter's Lease renew deadline
// (40 s), so the exporter started afresh instead of seeing a restart.
func (c *Cluster) RestartAPIServer(t *testing.T, timeout time.Duration) {
	t.Helper()
	ctx := t.Context()
	pod := "kube-apiserver-" + c.Name + "-control-plane"
	restarts := func() (int32, error) {
		p, err := c.CS.CoreV1().Pods("kube-system").Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return 0, err
		}
		if len(p.Status.ContainerStatuses) != 1 {
			return 0, fmt.Errorf("%s: %d container statuses", pod, len(p.Status.ContainerStatuses))
		}
		return p.Status.ContainerStatuses[0].RestartCount, nil
	}
	before, err := restarts()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := c.Node(t).Command("pkill", "-KILL", "-x", "kube-apiserver").SetStdout(&out).SetStderr(&out).Run(); err != nil {
		t.Fatalf("pkill kube-apiserver in %s: %v\n%s", c.Name, err, out.String())
	}
	start := time.Now()
	for {
		n, err := restarts()
		if err == nil && n > before {
			if _, err = c.CS.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err == nil {
				t.Logf("kube-apiserver restarted and ready %s after SIGKILL", time.Since(start).Round(100*time.Millisecond))
				return
			}
		}
		if time.Since(start) > timeout {
			t.Fatalf("kube-apiserver of %s: not restarted and ready %s after SIGKILL (restarts %d, before %d: %v)\n%s", c.Name, timeout, n, before, err, c.nodeLogs())
		}
		time.Sleep(time.Second)
	}
}

// LoadImageArchive imports an image archive into the node's containerd, as
// `kind load image-archive` does.
func (c *Cluster) LoadImageArchive(t *testing.T, archive string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := nodeutils.LoadImageArchive(c.Node(t), f); err != nil {
		t.Fatalf("load %s into %s: %v", archive, c.Name, err)
	}
}

// logger keeps kind's messages, up to V(1), for a failure's report.
type logger struct{ b *bytes.Buffer }

func (l *logger) Warn(m string)             { fmt.Fprintln(l.b, m) }
func (l *logger) Warnf(f string, a ...any)  { fmt.Fprintf(l.b, f+"\n", a...) }
func (l *logger) Error(m string)            { fmt.Fprintln(l.b, m) }
func (l *logger) Errorf(f string, a ...any) { fmt.Fprintf(l.b, f+"\n", a...) }
func (l *logger) V(v kindlog.Level) kindlog.InfoLogger {
	return infoLogger{l.b, v <= 1}
}

type infoLogger struct {
	b  *bytes.Buffer
	on bool
}

func (i infoLogger) Info(m string) {
	if i.on {
		fmt.Fprintln(i.b, m)
	}
}

func (i infoLogger) Infof(f string, a ...any) {
	if i.on {
		fmt.Fprintf(i.b, f+"\n", a...)
	}
}

func (i infoLogger) Enabled() bool { return i.on }

// PortForward forwards a port of this machine's loopback to port of pod in
// namespace ns until t ends, and returns the local port.
func (c *Cluster) PortForward(t *testing.T, ns, pod string, port int) uint16 {
	t.Helper()
	tr, upgrader, err := spdy.RoundTripperFor(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	url := c.CS.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("portforward").URL()
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(spdy.NewDialer(upgrader, &http.Client{Transport: tr}, http.MethodPost, url),
		[]string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	t.Cleanup(func() { close(stop); <-done })
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("port-forward to %s/%s:%d: %v", ns, pod, port, err)
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		t.Fatalf("port-forward to %s/%s:%d: ports %v (%v)", ns, pod, port, ports, err)
	}
	return ports[0].Local
}
