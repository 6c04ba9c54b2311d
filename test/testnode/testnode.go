// Package testnode runs a whole local Kubernetes node for one test: the
// control plane of testcluster, containerd with runc, a CNI bridge, the
// kubelet, kube-controller-manager, kube-scheduler and kube-proxy, all built
// from pinned modules by hack/kube and hack/node.
//
// The node lives in namespaces of its own, as kind's node container does:
// Run executes the test again in a child process with new network, mount, PID
// and UTS namespaces. Every address, bridge, route, iptables rule, sysctl and
// mount is made inside them, and the kernel removes them all, with every
// process, when the child ends, however it ends. The kubelet's cgroups live
// under a parent of the node's own (cgroupRoot), which Run creates before and
// removes after. The machine's own interfaces are never used.
package testnode

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/watchcache/watchcache-exporter/test/testcluster"
	"github.com/watchcache/watchcache-exporter/test/testnetns"
)

// The node's addresses. They belong to interfaces of the node's own network
// namespace only.
const (
	// NodeName is the Node's name and the namespace's hostname.
	NodeName = "wce-node"
	// NodeIP is the node's address: the apiserver binds to and advertises
	// it, the kubelet registers it.
	NodeIP = "10.200.0.2"
	// PodCIDR is the bridge network's range.
	PodCIDR = "10.244.0.0/24"
	// APIServerPort is the apiserver's port on NodeIP.
	APIServerPort = 6443
)

// Hint says how to get what the node needs.
const Hint = "build them with `make node-bin image` (hack/kube/build.sh and hack/node/build.sh), or point " + testcluster.BinDirEnv + " at a folder that holds them"

// Binaries are the node's programs in the bin folder, besides etcd and
// kube-apiserver.
var Binaries = []string{
	"kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl",
	"containerd", "containerd-shim-runc-v2", "ctr", "runc",
	"cni/bridge", "cni/host-local", "cni/loopback", "cni/portmap",
	PauseArchive,
}

// PauseArchive is the sandbox image that `make image` builds, in the bin
// folder; PauseImage is its name.
const (
	PauseArchive = "pause-image.tar"
	PauseImage   = "localhost/watchcache-exporter/pause:1"
)

// hostTools are Debian's programs the node runs: ip sets up its interfaces,
// iptables is what kube-proxy and the portmap plugin drive.
var hostTools = []string{"ip", "iptables", "iptables-save"}

// Options configure the node.
type Options struct {
	// BinDir holds the binaries; default testcluster.FindBinDir().
	BinDir string
	// Images are image archives imported into containerd before the kubelet
	// starts, so that pods need no registry.
	Images []string
	// APIServerFlags are added to the apiserver's.
	APIServerFlags []string
}

// childEnv carries the child's settings from Run in the parent.
const childEnv = "WATCHCACHE_TESTNODE"

type childConfig struct {
	Dir        string
	CgroupRoot string
}

// Run runs fn on a fresh node. Called in the test's own process, it checks
// the prerequisites (skip, or failure with $WATCHCACHE_REQUIRE_KUBE=1),
// creates the cgroup parent, runs this test again in new namespaces and waits
// for it, relaying its output; then it removes the cgroups and checks that
// nothing of the node is left in the machine's namespaces. Called in that
// child, it starts the node and runs fn. Run must be called from a top-level
// test, as the first thing it does.
func Run(t *testing.T, opts Options, fn func(t *testing.T, n *Node)) {
	t.Helper()
	testcluster.Real(t)
	if opts.BinDir == "" {
		bin, err := testcluster.FindBinDir()
		if err != nil {
			t.Fatal(err)
		}
		opts.BinDir = bin
	}
	if env := os.Getenv(childEnv); env != "" {
		var cfg childConfig
		if err := json.Unmarshal([]byte(env), &cfg); err != nil {
			t.Fatalf("%s: %v", childEnv, err)
		}
		n := start(t, cfg, opts)
		fn(t, n)
		return
	}
	if err := CheckPrerequisites(opts.BinDir); err != nil {
		testcluster.Missing(t, err.Error())
	}
	runParent(t, opts)
}

// CheckPrerequisites says what the node lacks: root, a binary, a host tool,
// an image archive.
func CheckPrerequisites(binDir string) error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (the node makes namespaces, mounts and cgroups)")
	}
	if err := testcluster.CheckBinaries(binDir); err != nil {
		missing = append(missing, err.Error())
	}
	var bins []string
	for _, b := range Binaries {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			bins = append(bins, filepath.Join(binDir, b))
		}
	}
	if len(bins) > 0 {
		missing = append(missing, "node binaries missing: "+strings.Join(bins, ", ")+"; "+Hint)
	}
	for _, tool := range hostTools {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool+" is not on the PATH; install Debian's iproute2 and iptables (make node-bin does)")
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory/cgroup.procs"); err != nil {
		missing = append(missing, "cgroup v1 hierarchies under /sys/fs/cgroup (this harness drives the kubelet's cgroupfs driver on cgroup v1)")
	}
	if len(missing) > 0 {
		return errors.New(strings.Join(missing, "; "))
	}
	return nil
}

func runParent(t *testing.T, opts Options) {
	t.Helper()
	// A whole node: a control plane, containerd, the kubelet and three more.
	t.Cleanup(testcluster.TakeSlots(t, 2))
	removeStaleCgroups(t)
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	cfg := childConfig{CgroupRoot: "/" + cgroupRootName(hex.EncodeToString(suffix))}
	// Short: containerd's socket path must fit in 108 bytes.
	dir, err := os.MkdirTemp("", "wce-")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Dir = dir
	before := testnetns.HostState(t)
	if err := createCgroups(cfg.CgroupRoot); err != nil {
		_ = removeCgroups(cfg.CgroupRoot, time.Second)
		t.Fatal(err)
	}
	env, _ := json.Marshal(cfg)

	start := time.Now()
	// The child is the PID namespace's init: when it dies, the kernel kills
	// every process of the node.
	interrupted, werr := testnetns.Reexec(t, syscall.CLONE_NEWNET|syscall.CLONE_NEWNS|syscall.CLONE_NEWPID|syscall.CLONE_NEWUTS, childEnv+"="+string(env))
	t.Logf("node test ran %s in its namespaces", time.Since(start).Round(time.Second))

	// The PID namespace is gone, so are its processes; their cgroups
	// empty out.
	if err := removeCgroups(cfg.CgroupRoot, 30*time.Second); err != nil {
		t.Errorf("cgroups left behind: %v", err)
	}
	if after := testnetns.HostState(t); after != before {
		t.Errorf("the machine's own network namespace or mounts changed while the node ran:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if interrupted != "" {
		t.Fatalf("interrupted (%s): the node was killed and its cgroups removed; its logs are kept in %s", interrupted, dir)
	}
	if werr != nil {
		t.Fatalf("the test on the node failed (%v); the node's logs are kept in %s", werr, dir)
	}
	if t.Failed() {
		t.Logf("the node's logs are kept in %s", dir)
		return
	}
	_ = os.RemoveAll(dir)
}
