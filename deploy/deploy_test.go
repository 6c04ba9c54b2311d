// Tests of deploy/ against the real apiserver: every object is accepted,
// the Role is exactly what the exporter needs, and the pod passes the
// restricted Pod Security level.
package deploy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/watchcache/watchcache-exporter/test/e2e"
	"github.com/watchcache/watchcache-exporter/test/exportertest"
	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

const ns = "watchcache-exporter"

var components = []string{"prometheus-operator", "discovery", "apf", "grafana-dashboards", "resources", "resources-all"}

// render builds deploy/base with the given components through an overlay in
// a copy of deploy/.
func render(t *testing.T, comps ...string) []*unstructured.Unstructured {
	t.Helper()
	return renderIn(t, "", comps...)
}

// renderIn is render through an overlay that moves everything to namespace
// (none: deploy/'s own).
func renderIn(t *testing.T, namespace string, comps ...string) []*unstructured.Unstructured {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(".")); err != nil {
		t.Fatal(err)
	}
	overlay := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../base]\n" +
		"images: [{name: watchcache-exporter, newName: " + testRepository + ", newTag: " + testTag + "}]\n"
	if namespace != "" {
		overlay += "namespace: " + namespace + "\n"
	}
	if len(comps) > 0 {
		overlay += "components:\n"
		for _, c := range comps {
			overlay += "  - ../components/" + c + "\n"
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "overlay"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "overlay", "kustomization.yaml"), []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	return kustomize(t, filepath.Join(dir, "overlay"))
}

// renderExample builds deploy/examples/name with comps as its components.
func renderExample(t *testing.T, name string, comps ...string) []*unstructured.Unstructured {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(".")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "examples", name, "kustomization.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	k := map[string]any{}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	var cs []string
	for _, c := range comps {
		cs = append(cs, "../../components/"+c)
	}
	k["components"] = cs
	if b, err = yaml.Marshal(k); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return kustomize(t, filepath.Dir(path))
}

func kustomize(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range rm.Resources() {
		m, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs
}

func find[T any](t *testing.T, objs []*unstructured.Unstructured, kind string) *T {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind {
			var v T
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, &v, true); err != nil {
				t.Fatalf("%s %s: %v", kind, o.GetName(), err)
			}
			return &v
		}
	}
	t.Fatalf("no %s rendered", kind)
	return nil
}

func TestDeploy(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{})
	ctx := t.Context()
	admin := c.AdminConfig()
	cs := kubernetes.NewForConfigOrDie(admin)
	dyn := dynamic.NewForConfigOrDie(admin)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cs.Discovery()))

	base := render(t)
	// The namespace for real: namespaced objects cannot be dry-run into a
	// namespace that does not exist.
	for _, o := range base {
		if o.GetKind() == "Namespace" {
			if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.GetName(), Labels: o.GetLabels()}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// dryRun applies objs with dryRun=All: the apiserver validates each
	// as it would store it.
	dryRun := func(t *testing.T, objs []*unstructured.Unstructured, from string) {
		t.Helper()
		for _, o := range objs {
			what := fmt.Sprintf("%s %s/%s (%s)", o.GetKind(), o.GetNamespace(), o.GetName(), from)
			m, err := mapper.RESTMapping(o.GroupVersionKind().GroupKind(), o.GroupVersionKind().Version)
			if meta.IsNoMatchError(err) {
				// No CRD here: decode strictly with the operator's types.
				strictDecode(t, what, o)
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
			if m.Scope.Name() == meta.RESTScopeNameNamespace {
				ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
			}
			_, err = ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: "deploy-test", DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				t.Errorf("%s: server-side dry-run: %v", what, err)
			}
		}
	}
	// podDryRun creates the Deployment's pod with dryRun=All in the
	// restricted namespace: Pod Security admission checks pods, not
	// Deployments.
	podDryRun := func(t *testing.T, objs []*unstructured.Unstructured) *corev1.Pod {
		t.Helper()
		dep := find[appsv1.Deployment](t, objs, "Deployment")
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "psa-probe", Namespace: ns}, Spec: dep.Spec.Template.Spec}
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("the Deployment's pod is refused: %v", err)
		}
		return pod
	}

	t.Run("server-side dry-run of every object", func(t *testing.T) {
		for _, comp := range append([]string{""}, components...) {
			var objs []*unstructured.Unstructured
			if comp == "" {
				objs = base
			} else {
				objs = render(t, comp)
			}
			dryRun(t, objs, fmt.Sprintf("component %q", comp))
		}
	})

	t.Run("pod passes Pod Security restricted", func(t *testing.T) {
		nsObj, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if nsObj.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
			t.Fatalf("namespace %s labels %v: want enforce=restricted", ns, nsObj.Labels)
		}
		applyRBAC(t, cs, base) // the pod's ServiceAccount must exist
		pod := podDryRun(t, base)
		// The same pod without its hardening is refused: the check is real.
		weak := pod.DeepCopy()
		weak.Spec.Containers[0].SecurityContext = nil
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, weak, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err == nil || !strings.Contains(err.Error(), "violates PodSecurity") {
			t.Errorf("a pod without securityContext: err = %v, want a PodSecurity violation", err)
		}
	})

	// The Helm chart's renderings, as `helm install --dry-run=server` would
	// send them, into the same restricted namespace.
	t.Run("helm chart: server-side dry-run and Pod Security restricted", func(t *testing.T) {
		for _, tc := range chartCases {
			objs := mustRenderChart(t, tc.values)
			dryRun(t, objs, "chart "+tc.name)
			podDryRun(t, objs)
		}
	})

	// Every RV from before a restart is refused at once: the window probe
	// then reports without waiting for the cache to wrap.
	if err := c.APIServer().Restart(ctx); err != nil {
		t.Fatal(err)
	}
	cs = kubernetes.NewForConfigOrDie(c.AdminConfig())
	role := applyRBAC(t, cs, base)
	saCfg, err := c.ServiceAccountConfig(ctx, ns, "watchcache-exporter")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("exporter works with deploy's RBAC", func(t *testing.T) {
		dep := find[appsv1.Deployment](t, base, "Deployment")
		args := append(slices.Clone(dep.Spec.Template.Spec.Containers[0].Args), "--namespace="+ns)
		for _, mode := range [][]string{args, append(slices.Clone(args), "--load.rate=0")} {
			e := exportertest.Start(t, saCfg, mode...)
			var m exportertest.Metrics
			e.WaitFor(t, 2*time.Minute, fmt.Sprintf("watchers open, window probe and reconnects working with args %v", mode), func(got exportertest.Metrics) bool {
				m = got
				return metric(m, "watchcache_oldest_resource_version") > 0 &&
					metric(m, "watchcache_watch_open", "watcher", "bookmarks") == 1 &&
					metric(m, "watchcache_watch_open", "watcher", "plain") == 1 &&
					metric(m, "watchcache_reconnects_total", "from", "stale", "result", "ok") > 0
			})
			if errs := m.Samples("watchcache_exporter_api_errors_total", "operation"); len(errs) > 0 {
				t.Errorf("args %v: API errors under deploy's RBAC: %v", mode, errs)
			}
			e2e.OwnedByServiceAccount(t, cs, ns, "watchcache-exporter")
			if !slices.Contains(mode, "--load.rate=0") && metric(m, "watchcache_load_writes_total", "result", "ok") <= 0 {
				t.Errorf("args %v: no load written", mode)
			}
			if code := e.Stop(t); code != 0 {
				t.Errorf("args %v: exit status %d after stop", mode, code)
			}
		}
	})

	t.Run("each rule of the Role is needed", func(t *testing.T) {
		for i, rule := range role.Rules {
			reduced := role.DeepCopy()
			reduced.Rules = slices.Delete(reduced.Rules, i, i+1)
			reduced, err := cs.RbacV1().Roles(ns).Update(ctx, reduced, metav1.UpdateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			args := []string{"--namespace=" + ns}
			resource := rule.Resources[0]
			if rule.APIGroups[0] != "" {
				resource += "." + rule.APIGroups[0]
			}
			want := fmt.Sprintf("RBAC denies %s %s in namespace %s", rule.Verbs[0], resource, ns)
			var out string
			for range 50 { // the authorizer sees the new Role within moments
				var code int
				if code, out = exportertest.RunToExit(t, saCfg, args...); code == 1 && strings.Contains(out, want) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if !strings.Contains(out, want) {
				t.Errorf("without rule %d (%v %v): output %q, want %q", i, rule.Verbs, rule.Resources, out, want)
			}
			for _, v := range rule.Verbs[1:] {
				if !strings.Contains(out, v+" "+resource) {
					t.Errorf("without rule %d: output %q does not name %s", i, out, v)
				}
			}
			restored := reduced.DeepCopy()
			restored.Rules = role.Rules
			if role, err = cs.RbacV1().Roles(ns).Update(ctx, restored, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	})

	for _, comp := range []string{"resources", "resources-all"} {
		t.Run("component "+comp+": the exporter works with its ClusterRole, and needs each rule", func(t *testing.T) {
			objs := render(t, comp)
			cr := find[rbacv1.ClusterRole](t, objs, "ClusterRole")
			crb := find[rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding")
			if _, err := cs.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			defer func() {
				_ = cs.RbacV1().ClusterRoleBindings().Delete(ctx, crb.Name, metav1.DeleteOptions{})
				_ = cs.RbacV1().ClusterRoles().Delete(ctx, cr.Name, metav1.DeleteOptions{})
			}()
			dep := find[appsv1.Deployment](t, objs, "Deployment")
			args := append(slices.Clone(dep.Spec.Template.Spec.Containers[0].Args), "--namespace="+ns, "--load.rate=0", "--resources.interval=2s")
			e := exportertest.Start(t, saCfg, args...)
			// A window needs two rounds (the first object count places each
			// resource's clock); at the default budget of 5 requests/s a
			// round of all of a cluster's ~55 resources takes 22 s: two
			// rounds and a minute more, as a busy machine takes.
			e.WaitFor(t, 2*time.Minute, "every resource's window", func(m exportertest.Metrics) bool {
				n := 0
				for _, x := range m["watchcache_window_seconds"].GetMetric() {
					if v := x.GetGauge().GetValue(); v > 0 {
						n++
					}
				}
				// configmaps, and the three of the component or all.
				return n >= 4 && len(m["watchcache_window_seconds"].GetMetric()) == n
			})
			m := e.Scrape(t)
			if errs := m.Samples("watchcache_resource_probe_errors_total", "resource"); len(errs) > 0 {
				t.Errorf("probe errors under the component's ClusterRole: %v", errs)
			}
			if errs := m.Samples("watchcache_resource_objects_errors_total", "resource"); len(errs) > 0 {
				t.Errorf("object count errors under the component's ClusterRole: %v", errs)
			}
			e.Stop(t)
			for i, rule := range cr.Rules {
				reduced, err := cs.RbacV1().ClusterRoles().Get(ctx, cr.Name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				reduced.Rules = slices.Delete(slices.Clone(cr.Rules), i, i+1)
				if _, err := cs.RbacV1().ClusterRoles().Update(ctx, reduced, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
				var wants []string
				if rule.Resources[0] == "*" {
					wants = []string{"--resources=all: list apiservices.apiregistration.k8s.io", "forbidden"}
				} else {
					resource := rule.Resources[0]
					if rule.APIGroups[0] != "" {
						resource += "." + rule.APIGroups[0]
					}
					for _, v := range rule.Verbs {
						wants = append(wants, fmt.Sprintf("%s %s cluster-wide", v, resource))
					}
				}
				var out string
				for range 50 { // the authorizer sees the new ClusterRole within moments
					var code int
					if code, out = exportertest.RunToExit(t, saCfg, args...); code == 1 && strings.Contains(out, wants[0]) {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				for _, want := range wants {
					if !strings.Contains(out, want) {
						t.Errorf("without rule %d (%v %v %v): output %q, want %q", i, rule.APIGroups, rule.Resources, rule.Verbs, out, want)
					}
				}
				if _, err := cs.RbacV1().ClusterRoles().Update(ctx, cr.DeepCopy(), metav1.UpdateOptions{}); err != nil {
					// cr has no resourceVersion: an unconditional update.
					t.Fatal(err)
				}
			}
		})
	}
}

// applyRBAC creates the base's ServiceAccount, Role and RoleBinding (idempotent)
// and returns the Role.
func applyRBAC(t *testing.T, cs kubernetes.Interface, objs []*unstructured.Unstructured) *rbacv1.Role {
	t.Helper()
	ctx := t.Context()
	sa := find[corev1.ServiceAccount](t, objs, "ServiceAccount")
	role := find[rbacv1.Role](t, objs, "Role")
	rb := find[rbacv1.RoleBinding](t, objs, "RoleBinding")
	for _, err := range []error{
		ignoreExists(cs.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{})),
		ignoreExists(cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{})),
		ignoreExists(cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{})),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	got, err := cs.RbacV1().Roles(ns).Get(ctx, role.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func ignoreExists[T any](_ T, err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func strictDecode(t *testing.T, what string, o *unstructured.Unstructured) {
	t.Helper()
	b, err := yaml.Marshal(o.Object)
	if err != nil {
		t.Fatal(err)
	}
	var target any
	switch o.GetKind() {
	case "ServiceMonitor":
		target = &monitoringv1.ServiceMonitor{}
	case "PrometheusRule":
		target = &monitoringv1.PrometheusRule{}
	default:
		t.Errorf("%s: the apiserver does not know this kind and no Go type checks it", what)
		return
	}
	if err := yaml.UnmarshalStrict(b, target); err != nil {
		t.Errorf("%s: strict decode: %v", what, err)
	}
}

// metric is the one sample of name with the label pairs given, or -1.
func metric(m exportertest.Metrics, name string, labelPairs ...string) float64 {
	v, err := m.Get(name, labelPairs...)
	if err != nil {
		return -1
	}
	return v
}
