package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/kube"
	release "helm.sh/helm/v4/pkg/release/v1"
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

// Uninstall is `helm uninstall release --wait`.
func (h Helm) Uninstall(t *testing.T, name string) {
	t.Helper()
	u := action.NewUninstall(h.config(t))
	u.WaitStrategy, u.Timeout = kube.StatusWatcherStrategy, helmTimeout
	if _, err := u.Run(name); err != nil {
		t.Fatalf("helm uninstall %s: %v", name, err)
	}
}
