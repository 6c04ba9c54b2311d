package experiment_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/watchcache/watchcache-exporter/experiment"
	"github.com/watchcache/watchcache-exporter/internal/leader"
	"github.com/watchcache/watchcache-exporter/internal/owned"
	"github.com/watchcache/watchcache-exporter/test/exportertest"
	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

func TestMain(m *testing.M) { os.Exit(exportertest.Main(m)) }

// TestExperiment runs the experiment against a real apiserver as a user
// would: `kubectl watchcache experiment`, kubectl finding the plugin on
// $PATH. Its report must say what the apiserver says, and it must leave
// nothing behind; Ctrl-C mid-run cleans up too, and it refuses to start
// beside another exporter or over somebody else's ConfigMap.
func TestExperiment(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{})
	ctx := t.Context()
	admin := kubernetes.NewForConfigOrDie(c.AdminConfig())
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := testcluster.WriteKubeconfig(kubeconfig, c.AdminConfig()); err != nil {
		t.Fatal(err)
	}
	bin, err := testcluster.FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	namespace := func(name string) string {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return name
	}
	// plugin runs `kubectl watchcache experiment args...`.
	plugin := func(ctx context.Context, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "kubectl"), append([]string{"watchcache", "experiment", "--kubeconfig=" + kubeconfig}, args...)...)
		cmd.Env = append(os.Environ(), "PATH="+exportertest.PluginPath(t), exportertest.ChildEnv)
		return cmd
	}

	t.Run("report", func(t *testing.T) {
		ns := namespace("experiment")
		// The user's kubeconfig as kubectl reads it, from $KUBECONFIG: its
		// current context is another cluster; --context picks this one, and
		// the run must write in that context's namespace, as kubectl would.
		kc, err := clientcmd.LoadFromFile(kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		kc.Contexts["this"] = kc.Contexts[kc.CurrentContext].DeepCopy()
		kc.Contexts["this"].Namespace = ns
		kc.Clusters["elsewhere"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
		kc.Contexts["elsewhere"] = &clientcmdapi.Context{Cluster: "elsewhere", AuthInfo: kc.Contexts["this"].AuthInfo, Namespace: "default"}
		kc.CurrentContext = "elsewhere"
		userConfig := filepath.Join(t.TempDir(), "config")
		if err := clientcmd.WriteToFile(*kc, userConfig); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "kubectl"), "watchcache", "experiment", "--context=this", "--load.rate=85", "--output=json", "--timeout=5m")
		cmd.Env = append(os.Environ(), "PATH="+exportertest.PluginPath(t), exportertest.ChildEnv, "KUBECONFIG="+userConfig)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		if err := cmd.Run(); err != nil {
			t.Fatalf("kubectl watchcache experiment: %v\nstderr:\n%s\nstdout:\n%s", err, stderr.String(), stdout.String())
		}
		t.Logf("ran %s; stderr:\n%s", time.Since(start).Round(time.Second), stderr.String())
		var r experiment.Report
		if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
			t.Fatalf("the JSON report does not parse: %v\n%s", err, stdout.String())
		}
		fams, err := c.APIServer().Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		capacity, err := testcluster.Value(fams, "watch_cache_capacity", map[string]string{"resource": "configmaps"})
		if err != nil {
			t.Fatal(err)
		}
		if r.Namespace != ns {
			t.Errorf("the report's namespace is %q, want the context's %q", r.Namespace, ns)
		}
		if len(r.APIServers) != 1 || len(r.APIServers[0].Cycles) != 1 || r.TimedOut {
			t.Fatalf("want one apiserver with one cycle, not timed out: %s", stdout.String())
		}
		cy := r.APIServers[0].Cycles[0]
		t.Logf("85 writes/s: first BOOKMARK %.1f s (RV %d), %d writes and %.1f s to the 410 %q, %d events in the cache against the apiserver's capacity %v, BOOKMARK reconnect %s (%.1f s old), relist RV %d; predicted %d events, %.1f s",
			cy.FirstBookmarkSeconds, cy.FirstBookmarkRV, cy.WritesTo410, cy.SecondsTo410, cy.Message, cy.EventsInCache, capacity, cy.BookmarkReconnect,
			cy.BookmarkAgeSeconds, cy.RelistRV, r.Predicted.Capacity, r.Predicted.WindowSeconds)
		// The capacity as the apiserver gives it: within 0.3%, the writes in
		// flight as the 410 arrived.
		if math.Abs(float64(cy.EventsInCache)-capacity) > 0.003*capacity {
			t.Errorf("events in the cache %d, the apiserver's capacity %v", cy.EventsInCache, capacity)
		}
		// O as the apiserver's own message gives it.
		m := regexp.MustCompile(`^too old resource version: (\d+) \((\d+)\)$`).FindStringSubmatch(cy.Message)
		if m == nil {
			t.Fatalf("message %q is not the watch cache's", cy.Message)
		}
		if stale, _ := strconv.ParseUint(m[1], 10, 64); stale != cy.StaleRV {
			t.Errorf("the message refuses %d, the report's stale RV is %d", stale, cy.StaleRV)
		}
		if o, _ := strconv.ParseUint(m[2], 10, 64); o != cy.OldestRV || cy.StaleDistance != int64(o)-int64(cy.StaleRV) || cy.StaleDistance <= 0 {
			t.Errorf("the message's O is %s; the report says O %d, distance %d from %d", m[2], cy.OldestRV, cy.StaleDistance, cy.StaleRV)
		}
		if cy.BookmarkReconnect != "ok" || cy.BookmarkRV <= cy.OldestRV {
			t.Errorf("the BOOKMARK reconnect from %d (O %d): %s %s", cy.BookmarkRV, cy.OldestRV, cy.BookmarkReconnect, cy.BookmarkMessage)
		}
		if cy.FirstBookmarkRV == 0 || cy.RelistRV <= cy.OldestRV || cy.PlainWatcherEvents != 1 {
			t.Errorf("first BOOKMARK RV %d, relist RV %d (O %d), plain watcher events %d (want 1: the touch that began the cycle)",
				cy.FirstBookmarkRV, cy.RelistRV, cy.OldestRV, cy.PlainWatcherEvents)
		}
		// The writes the exporter counted came at the rate asked for.
		if rate := float64(cy.WritesTo410) / cy.SecondsTo410; math.Abs(rate-85) > 85*0.05 {
			t.Errorf("%d writes in %.1f s: %.1f writes/s, want 85", cy.WritesTo410, cy.SecondsTo410, rate)
		}
		if !strings.Contains(stderr.String(), "stopping: deleting the experiment's ConfigMaps and Lease") {
			t.Errorf("stderr does not say it cleans up:\n%s", stderr.String())
		}
		nothingLeft(t, admin, ns)
	})

	// start runs the experiment in namespace ns, and waits for its load.
	start := func(t *testing.T, ns string) (*exec.Cmd, *exportertest.SyncBuffer) {
		t.Helper()
		var out exportertest.SyncBuffer
		cmd := exportertest.Command("experiment", "--kubeconfig="+kubeconfig, "--namespace="+ns, "--load.rate=50")
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Mid-run: its load is writing.
		deadline := time.Now().Add(time.Minute)
		for {
			cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "watchcache-noise-0", metav1.GetOptions{})
			if err == nil && cm.Data["seq"] != "" {
				break
			}
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				t.Fatalf("no load within a minute: %v\n%s", err, out.String())
			}
			time.Sleep(200 * time.Millisecond)
		}
		return cmd, &out
	}

	// Ctrl-C, or the terminal closed: it cleans up and says so.
	for name, sig := range map[string]syscall.Signal{"sigint": syscall.SIGINT, "sighup": syscall.SIGHUP} {
		t.Run("interrupted by "+name, func(t *testing.T) {
			ns := namespace("experiment-" + name)
			cmd, out := start(t, ns)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != 130 || !strings.Contains(out.String(), "interrupted; deleted what it made") {
				t.Errorf("exit status after %s %d (%v), want 130 and a word that it deleted what it made\n%s", sig, code, err, out.String())
			}
			nothingLeft(t, admin, ns)
		})
	}

	// Another takes the Lease mid-run: the experiment stops writing, and at
	// the stop deletes nothing (the objects are the new holder's to write)
	// and names what it left.
	t.Run("lease lost", func(t *testing.T) {
		ns := namespace("experiment-lease-lost")
		cmd, out := start(t, ns)
		lease, err := admin.CoordinationV1().Leases(ns).Get(ctx, "watchcache-quiet", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		lease.Spec.HolderIdentity = ptr.To("another-exporter_0")
		lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		lease.Spec.LeaseDurationSeconds = ptr.To[int32](600)
		if _, err := admin.CoordinationV1().Leases(ns).Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(leader.RenewDeadline + time.Minute)
		for !strings.Contains(out.String(), "lost the lease") && time.Now().Before(deadline) {
			time.Sleep(time.Second)
		}
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != 130 || strings.Contains(out.String(), "deleted what it made") ||
			!strings.Contains(out.String(), "was lost before the stop") || !strings.Contains(out.String(), "watchcache-noise-0") {
			t.Errorf("exit status %d, want 130, and no word of deleting but the names of what it left:\n%s", code, out.String())
		}
		cms, err := admin.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: owned.ManagedBySelector})
		if err != nil || len(cms.Items) == 0 {
			t.Errorf("the ConfigMaps after a lost Lease: %v, %d left; want them left for the holder", err, len(cms.Items))
		}
		for _, cm := range cms.Items {
			if err := admin.CoreV1().ConfigMaps(ns).Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil {
				t.Error(err)
			}
		}
	})

	t.Run("refuses", func(t *testing.T) {
		// Another exporter holds the Lease: refused, naming the holder, and
		// the Lease left as it was.
		ns := namespace("experiment-held")
		lease, err := admin.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "watchcache-quiet", Labels: map[string]string{owned.ManagedByLabel: owned.ManagedBy}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("exporter-pod-0_1a2b3c4d"), LeaseDurationSeconds: ptr.To[int32](600),
				RenewTime: &metav1.MicroTime{Time: time.Now()}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out, code := run(t, plugin(ctx, "--namespace="+ns))
		if code != 1 || !strings.Contains(out, "is held by exporter-pod-0_1a2b3c4d") {
			t.Errorf("beside another exporter: exit %d, want 1 naming the holder:\n%s", code, out)
		}
		if l, err := admin.CoordinationV1().Leases(ns).Get(ctx, "watchcache-quiet", metav1.GetOptions{}); err != nil || l.ResourceVersion != lease.ResourceVersion {
			t.Errorf("the other exporter's Lease changed: %v", err)
		}
		if cms, err := admin.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: owned.ManagedBySelector}); err != nil || len(cms.Items) != 0 {
			t.Errorf("ConfigMaps made beside another exporter: %v %v", err, cms)
		}

		// Somebody else's ConfigMap of the quiet name: refused, and left as
		// it was.
		ns = namespace("experiment-foreign")
		theirs, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "watchcache-quiet"}, Data: map[string]string{"theirs": "yes"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out, code = run(t, plugin(ctx, "--namespace="+ns))
		if code != 1 || !strings.Contains(out, "is not this exporter's") {
			t.Errorf("over a foreign ConfigMap: exit %d, want 1 saying it is not ours:\n%s", code, out)
		}
		if cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "watchcache-quiet", metav1.GetOptions{}); err != nil || cm.ResourceVersion != theirs.ResourceVersion {
			t.Errorf("the foreign ConfigMap changed: %v", err)
		}
	})

	t.Run("flags", func(t *testing.T) {
		for args, want := range map[string]string{
			"--load.rate=0":        "--load.rate=0: the experiment needs writes",
			"--output=yaml":        `--output="yaml": want one of text, json, markdown`,
			"--repeat=0":           "--repeat=0: must be between 1 and 100",
			"--timeout=1s":         "--timeout=1s: must be between 10s and 24h",
			"--load.schedule=1:1m": "--load.schedule: the experiment writes at one rate",
		} {
			out, code := run(t, plugin(ctx, args))
			if code != 2 || !strings.Contains(out, want) {
				t.Errorf("%s: exit %d, want 2 and %q:\n%s", args, code, want, out)
			}
		}
		out, code := run(t, plugin(ctx, "--help"))
		if code != 0 || !strings.Contains(out, "Usage: watchcache-exporter experiment") || strings.Contains(out, "--web.listen-address") {
			t.Errorf("--help: exit %d, want 0 and the experiment's flags alone:\n%s", code, out)
		}
	})
}

// run runs cmd to its end, and returns its output and exit status.
func run(t *testing.T, cmd *exec.Cmd) (string, int) {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// nothingLeft checks that no ConfigMap or Lease of the experiment is left
// in ns.
func nothingLeft(t *testing.T, admin kubernetes.Interface, ns string) {
	t.Helper()
	ctx := t.Context()
	cms, err := admin.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: owned.ManagedBySelector})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, cm := range cms.Items {
		left = append(left, cm.Name)
	}
	if _, err := admin.CoordinationV1().Leases(ns).Get(ctx, "watchcache-quiet", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		left = append(left, fmt.Sprintf("lease (%v)", err))
	}
	if len(left) > 0 {
		t.Errorf("left behind in %s: %v", ns, left)
	}
}
