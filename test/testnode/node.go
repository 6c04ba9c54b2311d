package testnode

import (
	"context"
	"fmt"
	"net/http"
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

	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

// Node is a running node: the control plane, containerd, the kubelet and
// kube-proxy, in the namespaces Run made.
type Node struct {
	// Cluster is the control plane; its apiserver serves on NodeIP.
	Cluster *testcluster.Cluster
	// Dir holds every log, config and state folder of the node.
	Dir string
	// Kubeconfig is a system:masters kubeconfig for the apiserver, for
	// kubectl and Prometheus.
	Kubeconfig string
	// Ready is how long the Node took from the kubelet's start to Ready.
	Ready time.Duration

	bin        string
	cgroupRoot string
	procs      []*testcluster.Process
}

// Logs names the node's log files, for a failure message.
func (n *Node) Logs() string {
	return fmt.Sprintf("logs in %s (containerd.log, kubelet.log, kube-proxy.log, kube-controller-manager.log, kube-scheduler.log, control-plane/)", n.Dir)
}

// Ctr runs ctr against the node's containerd in the namespace the CRI uses.
func (n *Node) Ctr(args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(n.bin, "ctr"), append([]string{"--address", n.sock(), "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

func (n *Node) sock() string { return filepath.Join(n.Dir, "containerd.sock") }

// start brings the node up inside the child's namespaces, and stops it when
// t ends.
func start(t *testing.T, cfg childConfig, opts Options) *Node {
	t.Helper()
	n := &Node{Dir: cfg.Dir, bin: opts.BinDir, cgroupRoot: cfg.CgroupRoot}
	t.Cleanup(n.stop)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	if err := setupNamespaces(); err != nil {
		t.Fatalf("node namespaces: %v", err)
	}
	c, err := testcluster.New(ctx, testcluster.Options{
		BinDir:         opts.BinDir,
		Dir:            filepath.Join(n.Dir, "control-plane"),
		Address:        NodeIP,
		Port:           APIServerPort,
		APIServerFlags: opts.APIServerFlags,
	})
	if err != nil {
		t.Fatalf("control plane: %v", err)
	}
	n.Cluster = c
	n.Kubeconfig = filepath.Join(n.Dir, "admin.kubeconfig")
	if err := testcluster.WriteKubeconfig(n.Kubeconfig, c.AdminConfig()); err != nil {
		t.Fatal(err)
	}
	if err := n.writeConfigs(); err != nil {
		t.Fatal(err)
	}
	if err := n.startContainerd(ctx); err != nil {
		t.Fatalf("containerd: %v; %s", err, n.Logs())
	}
	for _, img := range append([]string{filepath.Join(opts.BinDir, PauseArchive)}, opts.Images...) {
		if _, err := n.Ctr("images", "import", img); err != nil {
			t.Fatal(err)
		}
	}
	n.run(t, "kube-controller-manager",
		"--kubeconfig="+n.Kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		// The kube-root-ca.crt ConfigMap that every projected token volume
		// mounts.
		"--root-ca-file="+c.CAFile(),
		"--service-cluster-ip-range="+testcluster.ServiceCIDR,
		"--use-service-account-credentials=false",
	)
	n.run(t, "kube-scheduler", "--kubeconfig="+n.Kubeconfig, "--leader-elect=false", "--bind-address=127.0.0.1")
	kubeletStart := time.Now()
	n.run(t, "kubelet",
		"--config="+filepath.Join(n.Dir, "kubelet.yaml"),
		"--kubeconfig="+n.Kubeconfig,
		"--root-dir="+filepath.Join(n.Dir, "kubelet"),
		"--hostname-override="+NodeName,
		"--node-ip="+NodeIP,
	)
	proxy := n.run(t, "kube-proxy", "--config="+filepath.Join(n.Dir, "kube-proxy.yaml"))
	if err := n.waitReady(ctx); err != nil {
		t.Fatalf("%v; %s", err, n.Logs())
	}
	n.Ready = time.Since(kubeletStart)
	if err := testcluster.WaitReady(ctx, proxy, http.DefaultClient, "http://127.0.0.1:10256/healthz", "", time.Minute); err != nil {
		t.Fatalf("kube-proxy: %v; %s", err, n.Logs())
	}
	t.Logf("node %s Ready %s after the kubelet started", NodeName, n.Ready.Round(10*time.Millisecond))
	return n
}

// setupNamespaces makes the child's fresh namespaces a node: mounts that
// propagate nowhere, a /proc of the new PID namespace, a /run of its own (runc
// and containerd keep state there), the hostname, and the network.
func setupNamespaces() error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	if err := syscall.Mount("tmpfs", "/run", "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=755"); err != nil {
		return fmt.Errorf("mount /run: %w", err)
	}
	if err := syscall.Sethostname([]byte(NodeName)); err != nil {
		return err
	}
	// A veth pair carries the node's address: this kernel has no dummy
	// interfaces. Both ends stay in the node's namespace.
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", "node0", "type", "veth", "peer", "name", "node1"},
		{"addr", "add", NodeIP + "/24", "dev", "node0"},
		{"link", "set", "node0", "up"},
		{"link", "set", "node1", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	for path, v := range map[string]string{
		// Pods reach Services through this namespace's iptables rules.
		"/proc/sys/net/ipv4/ip_forward":                "1",
		"/proc/sys/net/bridge/bridge-nf-call-iptables": "1",
	} {
		if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) writeConfigs() error {
	d := n.Dir
	files := map[string]string{
		"cni/net.d/10-bridge.conflist": fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "watchcache-testnode", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}
]}
`, filepath.Join(d, "cni", "ipam"), PodCIDR),

		"containerd.toml": fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[ttrpc]
  address = "%[3]s.ttrpc"
[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
  # This machine's root lacks CAP_SYS_RESOURCE: no process may lower its
  # oom_score_adj, so containers get containerd's instead of -998.
  restrict_oom_score_adj = true
  # Pod network namespaces are bind-mounted under state, not /run/netns.
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %[4]q
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%[5]q]
    conf_dir = %[6]q
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[7]q
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
[plugins.'io.containerd.internal.v1.opt']
  path = %[8]q
`, filepath.Join(d, "containerd", "root"), filepath.Join(d, "containerd", "state"), n.sock(),
			filepath.Join(n.bin, "runc"), filepath.Join(n.bin, "cni"), filepath.Join(d, "cni", "net.d"),
			PauseImage, filepath.Join(d, "containerd", "opt")),

		// No nameserver: nothing in the node may resolve or reach names
		// outside it.
		"resolv.conf": "",

		"kubelet.yaml": fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: %q
# The machine has cgroup v1 only; since v1.35 the kubelet refuses it unless
# told otherwise (k3s and minikube set the same).
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%s
address: %s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
resolvConf: %q
podLogsDir: %q
volumePluginDir: %q
# The test's disk is whatever the machine has: no eviction or image GC on it.
evictionHard: {"memory.available": "0%%", "nodefs.available": "0%%", "imagefs.available": "0%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`, n.cgroupRoot, n.sock(), NodeIP, filepath.Join(d, "resolv.conf"), filepath.Join(d, "pod-logs"), filepath.Join(d, "volume-plugins")),

		"kube-proxy.yaml": fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %q
mode: iptables
hostnameOverride: %s
clusterCIDR: %s
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# Zeros leave the conntrack sysctls alone: some are global to the machine.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, n.Kubeconfig, NodeName, PodCIDR),
	}
	for name, content := range files {
		p := filepath.Join(d, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) startContainerd(ctx context.Context) error {
	p := n.process("containerd", "--config="+filepath.Join(n.Dir, "containerd.toml"))
	// containerd finds its shim on the PATH, the shim finds runc by the
	// configured path.
	p.Env = []string{"PATH=" + n.bin + ":" + os.Getenv("PATH")}
	if err := p.Start(); err != nil {
		return err
	}
	n.procs = append(n.procs, p)
	for {
		if _, err := n.Ctr("version"); err == nil {
			return nil
		} else if done, _ := p.Exited(); done {
			return fmt.Errorf("exited: %v", err)
		} else if ctx.Err() != nil {
			return fmt.Errorf("not answering: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (n *Node) process(name string, args ...string) *testcluster.Process {
	return &testcluster.Process{Name: name, Path: filepath.Join(n.bin, name), Args: args, LogPath: filepath.Join(n.Dir, name+".log")}
}

func (n *Node) run(t *testing.T, name string, args ...string) *testcluster.Process {
	t.Helper()
	p := n.process(name, args...)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	n.procs = append(n.procs, p)
	return p
}

// waitReady waits for the Node to register and report Ready.
func (n *Node) waitReady(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(n.Cluster.AdminConfig())
	if err != nil {
		return err
	}
	last := "not registered"
	for {
		for _, p := range n.procs {
			if done, err := p.Exited(); done {
				return fmt.Errorf("%s exited (%v) before the node was Ready", p.Name, err)
			}
		}
		if node, err := cs.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{}); err == nil {
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady {
					if c.Status == corev1.ConditionTrue {
						return nil
					}
					last = fmt.Sprintf("Ready=%s: %s", c.Status, c.Message)
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s not Ready (%s)", NodeName, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// stop stops the node's processes, newest first, then the control plane.
// Pods' processes and the mounts they leave end with the namespaces.
func (n *Node) stop() {
	for i := len(n.procs) - 1; i >= 0; i-- {
		_ = n.procs[i].Stop(15 * time.Second)
	}
	if n.Cluster != nil {
		_ = n.Cluster.Stop()
	}
}
