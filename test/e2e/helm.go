package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/kube"
	release "helm.sh/helm/v4/pkg/release/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// Helm installs the chart in Namespace as the helm command would, through
// Helm's SDK, with the kubeconfig's credentials; releases are kept in
// Secrets, Helm's default.
type Helm struct {
	Kubeconfig, Namespace string
}

// Timeout of each Helm action, its wait for the objects included.
const helmTimeout = 3 * time.Minute

func (h Helm) config(t *testing.T) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &h.Kubeconfig
	flags.Namespace = &h.Namespace
	cfg := action.NewConfiguration()
	if err := cfg.Init(flags, h.Namespace, "secret"); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Install is `helm install release charts/watchcache-exporter --wait` with
// values; it returns the release's notes.
func (h Helm) Install(t *testing.T, name string, values map[string]any) string {
	t.Helper()
	chrt, err := loader.Load(filepath.Join(Root(t), "charts", "watchcache-exporter"))
	if err != nil {
		t.Fatal(err)
	}
	in := action.NewInstall(h.config(t))
	in.ReleaseName, in.Namespace = name, h.Namespace
	in.WaitStrategy, in.Timeout = kube.StatusWatcherStrategy, helmTimeout
	ctx, cancel := context.WithTimeout(t.Context(), helmTimeout)
	defer cancel()
	rel, err := in.RunWithContext(ctx, chrt, values)
	if err != nil {
		t.Fatalf("helm install %s: %v", name, err)
	}
	r, ok := rel.(*release.Release)
	if !ok || r.Info == nil {
		t.Fatalf("helm install %s: a release %T", name, rel)
	}
	return r.Info.Notes
}

// Upgrade is `helm upgrade release charts/watchcache-exporter --reuse-values
// --wait` with values set over the release's.
func (h Helm) Upgrade(t *testing.T, name string, values map[string]any) {
	t.Helper()
	chrt, err := loader.Load(filepath.Join(Root(t), "charts", "watchcache-exporter"))
	if err != nil {
		t.Fatal(err)
	}
	up := action.NewUpgrade(h.config(t))
	up.Namespace, up.ReuseValues = h.Namespace, true
	up.WaitStrategy, up.Timeout = kube.StatusWatcherStrategy, helmTimeout
	ctx, cancel := context.WithTimeout(t.Context(), helmTimeout)
	defer cancel()
	if _, err := up.RunWithContext(ctx, name, chrt, values); err != nil {
		t.Fatalf("helm upgrade %s: %v", name, err)
	}
}

// Uninstall is `helm uninstall release --wait`.
func (h Helm) Uninstall(t *testing.T, name string) {
	t.Helper()
	u := action.NewUninstall(h.config(t))
	u.WaitStrategy, u.Timeout = kube.StatusWatcherStrategy, helmTimeout
	if _, err := u.Run(name); err != nil {
		t.Fatalf("helm uninstall %s: %v", name, err)
	}
}

// Release is the chart installed by InstallRelease.
type Release struct {
	Helm
	Name, ServiceAccount string
}

// InstallRelease installs the chart with Helm's SDK as release rel, in a new
// namespace ns under Pod Security restricted, with the image of archive and
// values, and waits until the exporter holds its Lease. Its ConfigMaps and
// Lease must be owned by its ServiceAccount.
func InstallRelease(t *testing.T, c Cluster, archive, rel, ns string, values map[string]any) Release {
	t.Helper()
	ctx := t.Context()
	if _, err := c.CS.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CS.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	r := Release{Helm: Helm{Kubeconfig: c.Kubeconfig, Namespace: ns}, Name: rel, ServiceAccount: rel + "-watchcache-exporter"}
	vals := map[string]any{"image": map[string]any{"repository": "ghcr.io/watchcache/watchcache-exporter", "tag": ImageTag(t, archive)}}
	for k, v := range values {
		vals[k] = v
	}
	start := time.Now()
	notes := r.Install(t, rel, vals)
	if strings.Contains(notes, "no release label") {
		t.Errorf("the notes warn of a missing release label, which is set:\n%s", notes)
	}
	for {
		l, err := c.CS.CoordinationV1().Leases(ns).Get(ctx, Quiet, metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil {
			t.Logf("helm install %s: Lease held by %s %s after the install began", rel, *l.Spec.HolderIdentity, time.Since(start).Round(100*time.Millisecond))
			break
		}
		if time.Since(start) > 3*time.Minute {
			t.Fatalf("no Lease held in %s 3 minutes after helm install: %v", ns, err)
		}
		time.Sleep(time.Second)
	}
	OwnedByServiceAccount(t, c.CS, ns, r.ServiceAccount)
	return r
}

// UninstallLeavesNothing uninstalls the release and checks that nothing of
// it or of the exporter's is left anywhere. Helm deletes the pod's Role,
// RoleBinding and ServiceAccount in the same breath as its Deployment, so the
// pod's own cleanup is refused: the garbage collector must delete what the
// ServiceAccount owned.
func (r Release) UninstallLeavesNothing(t *testing.T, c Cluster) {
	t.Helper()
	ctx, ns := t.Context(), r.Namespace
	start := time.Now()
	r.Uninstall(t, r.Name)
	for {
		cms, err := c.CS.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: Marks})
		if err != nil {
			t.Fatal(err)
		}
		leases, err := c.CS.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: Marks})
		if err != nil {
			t.Fatal(err)
		}
		if len(cms.Items)+len(leases.Items) == 0 {
			break
		}
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("2 minutes after helm uninstall, %d ConfigMaps and %d Leases of the exporter's are left in %s", len(cms.Items), len(leases.Items), ns)
		}
		time.Sleep(time.Second)
	}
	t.Logf("helm uninstall %s: the exporter's objects gone %s after it began", r.Name, time.Since(start).Round(100*time.Millisecond))
	// The pod goes last, at the end of its grace period.
	instance := "app.kubernetes.io/instance=" + r.Name
	for {
		pods, err := c.CS.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: instance})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) == 0 {
			break
		}
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("2 minutes after helm uninstall, pod %s is still there", pods.Items[0].Name)
		}
		time.Sleep(time.Second)
	}
	for _, o := range c.Leftovers(t, Marks, instance) {
		t.Errorf("left after helm uninstall: %s", o)
	}
}
