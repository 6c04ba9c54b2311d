package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	release "helm.sh/helm/v4/pkg/release/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/watchcache/watchcache-exporter/daemon"
)

const chartDir = "../charts/watchcache-exporter"

// The image the tests install, in the chart's values and kustomize's
// images: no default is published, so each install names one.
const (
	testRepository = "registry.example/team/watchcache-exporter"
	testTag        = "v0.0.0-test"
)

// chartCases are the chart's settings and the kustomize components that
// give the same objects.
var chartCases = []struct {
	name   string
	values string
	comps  []string
}{
	{"defaults", ``, nil},
	{"prometheus-operator", "serviceMonitor: {enabled: true}\nprometheusRule: {enabled: true}", []string{"prometheus-operator"}},
	{"discovery", "discovery: {enabled: true}", []string{"discovery"}},
	{"apf", "apf: {enabled: true}", []string{"apf"}},
	{"grafana-dashboards", "grafanaDashboards: {enabled: true}", []string{"grafana-dashboards"}},
	{"resources", "resourceWindows: {enabled: true}", []string{"resources"}},
	{"resources-all", "resourceWindows: {enabled: true, all: true}", []string{"resources-all"}},
	{"all on", allOn, []string{"prometheus-operator", "discovery", "apf", "grafana-dashboards", "resources"}},
}

const allOn = `serviceMonitor: {enabled: true}
prometheusRule: {enabled: true}
discovery: {enabled: true}
apf: {enabled: true}
grafanaDashboards: {enabled: true}
resourceWindows: {enabled: true}`

func parseValues(t *testing.T, values string) map[string]any {
	t.Helper()
	vals := map[string]any{}
	if err := yaml.Unmarshal([]byte(values), &vals); err != nil {
		t.Fatalf("values %q: %v", values, err)
	}
	return vals
}

// renderChart is `helm template watchcache-exporter charts/watchcache-exporter
// -n watchcache-exporter -f values` through Helm's SDK.
func renderChart(t *testing.T, values string) ([]*unstructured.Unstructured, error) {
	t.Helper()
	return renderRelease(t, "watchcache-exporter", ns, values)
}

// renderRelease renders the chart as release name in namespace.
func renderRelease(t *testing.T, name, namespace, values string) ([]*unstructured.Unstructured, error) {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(action.NewConfiguration())
	install.DryRunStrategy = action.DryRunClient
	install.Replace = true
	install.ReleaseName = name
	install.Namespace = namespace
	install.KubeVersion = kubeVersion(t)
	vals := parseValues(t, values)
	if _, ok := vals["image"]; !ok {
		vals["image"] = map[string]any{"repository": testRepository, "tag": testTag}
	}
	rel, err := install.Run(chrt, vals)
	if err != nil {
		return nil, err
	}
	r, ok := rel.(*release.Release)
	if !ok {
		t.Fatalf("release is a %T", rel)
	}
	var objs []*unstructured.Unstructured
	for doc := range strings.SplitSeq(r.Manifest, "\n---\n") {
		m := map[string]any{}
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("rendered manifest: %v\n%s", err, doc)
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
	return objs, nil
}

// kubeVersion is the version of the apiserver the tests run, for the
// chart's kubeVersion check (Helm's offline default is v1.20).
func kubeVersion(t *testing.T) *common.KubeVersion {
	t.Helper()
	v, err := common.ParseKubeVersion("v1.37.2") // hack/kube's
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func mustRenderChart(t *testing.T, values string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := renderChart(t, values)
	if err != nil {
		t.Fatalf("helm template with %q: %v", values, err)
	}
	return objs
}

// helmLabels are the labels only Helm's objects carry: who installed them,
// which release and chart. Everything else must be the same.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}

// byKey turns objects into JSON-shaped maps by kind/namespace/name,
// without Helm's labels. The chart does not make the Namespace (Helm's
// --create-namespace cannot label it restricted), so it is left out.
func byKey(t *testing.T, objs []*unstructured.Unstructured) map[string]any {
	t.Helper()
	out := map[string]any{}
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			continue
		}
		b, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		dropHelmLabels(m)
		key := fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
		if _, dup := out[key]; dup {
			t.Fatalf("%s rendered twice", key)
		}
		out[key] = m
	}
	return out
}

// dropHelmLabels removes helmLabels from every label or selector map.
func dropHelmLabels(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, c := range v {
			if k == "labels" || k == "matchLabels" || k == "selector" {
				if m, ok := c.(map[string]any); ok {
					for _, l := range helmLabels {
						delete(m, l)
					}
					if len(m) == 0 {
						delete(v, k)
					}
				}
			}
			dropHelmLabels(c)
		}
	case []any:
		for _, c := range v {
			dropHelmLabels(c)
		}
	}
}

// TestChartMatchesKustomize renders the chart and deploy/ for the same
// settings and compares every object.
func TestChartMatchesKustomize(t *testing.T) {
	for _, tc := range chartCases {
		t.Run(tc.name, func(t *testing.T) {
			objs := mustRenderChart(t, tc.values)
			chart := byKey(t, objs) // a copy: objs keep Helm's labels
			kust := byKey(t, render(t, tc.comps...))
			if diff := cmp.Diff(kust, chart); diff != "" {
				t.Errorf("chart (+) and kustomize %v (-) differ:\n%s", tc.comps, diff)
			}
			// Helm's labels are on every object, so that `helm
			// uninstall` and selectors by release find them.
			for _, o := range objs {
				if got := o.GetLabels()["app.kubernetes.io/instance"]; got != "watchcache-exporter" {
					t.Errorf("%s %s: app.kubernetes.io/instance = %q", o.GetKind(), o.GetName(), got)
				}
			}
		})
	}
}

// TestChartNames: the exporter's names set in values reach both its flags
// and the Role's resourceNames, which kustomize users must edit in two
// places.
func TestChartNames(t *testing.T) {
	objs := mustRenderChart(t, "exporter: {quietName: q, noisePrefix: n-, loadObjects: 2, loadRate: 0}\nresourceWindows: {enabled: true, resources: [pods, leases.coordination.k8s.io]}\nextraArgs: [--load.max-rate=50]")
	dep := find[appsv1.Deployment](t, objs, "Deployment")
	args := dep.Spec.Template.Spec.Containers[0].Args
	want := []string{"--load.rate=0", "--log.format=json", "--quiet.name=q", "--noise.prefix=n-", "--load.objects=2", "--resources=pods,leases.coordination.k8s.io", "--load.max-rate=50"}
	if !slices.Equal(args, want) {
		t.Errorf("args = %q, want %q", args, want)
	}
	role := ruleNames(find[rbacv1.Role](t, objs, "Role").Rules)
	for _, w := range []string{"get,delete [q n-0 n-1]", "patch [n-0 n-1]", "update [q]", "list,watch [q]", "get,update,delete [q]"} {
		if !slices.Contains(role, w) {
			t.Errorf("Role rules %q: no rule %q", role, w)
		}
	}
	var cr []string
	for _, r := range find[rbacv1.ClusterRole](t, objs, "ClusterRole").Rules {
		cr = append(cr, fmt.Sprintf("%s %q %q", strings.Join(r.Verbs, ","), r.APIGroups, r.Resources))
	}
	if want := []string{`list,watch [""] ["pods"]`, `list,watch ["coordination.k8s.io"] ["leases"]`}; !slices.Equal(cr, want) {
		t.Errorf("ClusterRole rules %q, want %q", cr, want)
	}
}

func ruleNames(rules []rbacv1.PolicyRule) []string {
	var out []string
	for _, r := range rules {
		out = append(out, fmt.Sprintf("%s %v", strings.Join(r.Verbs, ","), r.ResourceNames))
	}
	return out
}

// TestChartValuesSchema: values.schema.json refuses bad values, naming the
// value.
// TestNoDefaultImage: no public registry serves the image, so neither the
// chart nor deploy/ names one there. The chart refuses to install without
// one, saying how to build and push it; deploy/base names the bare image
// that an overlay's images: replaces.
func TestNoDefaultImage(t *testing.T) {
	for _, values := range []string{"image: {}", "image: {repository: \"\"}", "image: {tag: v1}"} {
		_, err := renderChart(t, values)
		if err == nil || !strings.Contains(err.Error(), "image.repository: set the exporter's image") || !strings.Contains(err.Error(), "make push") {
			t.Errorf("values %q: error %v, want one that asks for image.repository and says how to push one", values, err)
		}
	}
	d := find[appsv1.Deployment](t, kustomize(t, "base"), "Deployment")
	if got := d.Spec.Template.Spec.Containers[0].Image; got != "watchcache-exporter" {
		t.Errorf("deploy/base's image is %q, want the bare watchcache-exporter that images: replaces", got)
	}
}

func TestChartValuesSchema(t *testing.T) {
	for _, tc := range []struct{ values, want string }{
		{"exporter: {loadObjects: 0}", "loadObjects"},
		{"exporter: {loadObjects: 1001}", "loadObjects"},
		{"exporter: {loadRate: -1}", "loadRate"},
		{"exporter: {loadRate: fast}", "loadRate"},
		{"exporter: {quietName: Quiet_CM}", "quietName"},
		{"exporter: {logFormat: xml}", "logFormat"},
		{"serviceMonitr: {enabled: true}", "serviceMonitr"},
		{"serviceMonitor: {enabled: yes-please}", "enabled"},
		{"serviceMonitor: {interval: 15}", "interval"},
		{"image: {pullPolicy: Sometimes}", "pullPolicy"},
		{"resourceWindows: {resources: [Pods!]}", "resources"},
		{"extraArgs: [load.rate=5]", "extraArgs"},
		{"service: {port: 70000}", "port"},
		{"serviceAccount: {create: false}", "name"},
		{"serviceAccount: {create: false, name: \"\"}", "name"},
		{"exporter: {loadSchedule: 7}", "loadSchedule"},
	} {
		_, err := renderChart(t, tc.values)
		if err == nil {
			t.Errorf("values %q accepted", tc.values)
			continue
		}
		if !strings.Contains(err.Error(), "schema") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("values %q: error %q does not name %s", tc.values, err, tc.want)
		}
	}
}

// TestChartArgsStart: the exporter accepts the flags every rendering passes
// (its own parser and checks, as at start), so no setting crash-loops it.
func TestChartArgsStart(t *testing.T) {
	for _, values := range []string{
		"", allOn, "resourceWindows: {enabled: true, all: true}",
		"exporter: {loadRate: 0}",
		"terminationGracePeriodSeconds: 10",
		"terminationGracePeriodSeconds: 120",
		"exporter: {loadSchedule: \"40:5m,100:5m,40:5m\"}",
		"exporter: {loadSchedule: \"sweep:10:400:6:3m\"}\nextraArgs: [--load.max-rate=400]",
	} {
		dep := find[appsv1.Deployment](t, mustRenderChart(t, values), "Deployment")
		args := dep.Spec.Template.Spec.Containers[0].Args
		if err := daemon.CheckFlags(args); err != nil {
			t.Errorf("values %q: the exporter refuses %q: %v", values, args, err)
		}
		stopsInGrace(t, dep)
	}
	for _, comps := range [][]string{nil, components} {
		dep := find[appsv1.Deployment](t, render(t, comps...), "Deployment")
		if err := daemon.CheckFlags(dep.Spec.Template.Spec.Containers[0].Args); err != nil {
			t.Errorf("kustomize %v: the exporter refuses its args: %v", comps, err)
		}
		stopsInGrace(t, dep)
	}
}

// stopsInGrace: the exporter's --shutdown.timeout (25s by default) ends at
// least 5 s before the kubelet's SIGKILL.
func stopsInGrace(t *testing.T, dep *appsv1.Deployment) {
	t.Helper()
	stop := 25 * time.Second
	for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--shutdown.timeout="); ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatal(err)
			}
			stop = d
		}
	}
	grace := time.Duration(*dep.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	if stop > grace-5*time.Second {
		t.Errorf("--shutdown.timeout=%s against terminationGracePeriodSeconds %s: want it 5 s shorter at least", stop, grace)
	}
}

// TestChartTwoReleasesOneName: no two releases share an object name
// outside their namespaces (cluster-scoped, or in default): one name in two
// namespaces, names that read alike once joined, long names that differ
// only past where they are cut.
func TestChartTwoReleasesOneName(t *testing.T) {
	long := strings.Repeat("x", 30) // Helm takes release names of 53 characters at most
	seen := map[string]string{}
	for _, r := range [][2]string{
		{"wce", "team-a"}, {"wce", "team-b"},
		{"watchcache-exporter", "prod-eu"}, {"watchcache-exporter-prod", "eu"},
		{long + "-watchcache-exporter", long + "-1"}, {long + "-watchcache-exporter", long + "-2"},
	} {
		release := r[0] + " in " + r[1]
		objs, err := renderRelease(t, r[0], r[1], allOn+"\nresourceWindows: {enabled: true}")
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if o.GetNamespace() == r[1] {
				continue
			}
			if n := o.GetName(); len(n) > 63 {
				t.Errorf("%s: %s %s is %d characters long, more than Kubernetes takes", release, o.GetKind(), n, len(n))
			}
			key := o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
			if other, dup := seen[key]; dup {
				t.Errorf("%s is rendered by the releases %s and %s", key, other, release)
			}
			seen[key] = release
		}
	}
	if len(seen) < 24 {
		t.Errorf("only %d objects outside the namespaces: %v", len(seen), seen)
	}
}

// TestChartLint is `helm lint --strict` of every rendering tested.
func TestChartLint(t *testing.T) {
	for _, tc := range chartCases {
		lint := action.NewLint()
		lint.Strict = true
		lint.Namespace = ns
		lint.KubeVersion = kubeVersion(t)
		res := lint.Run([]string{chartDir}, parseValues(t, tc.values))
		for _, m := range res.Messages {
			if m.Severity <= support.InfoSev { // "icon is recommended"
				continue
			}
			t.Errorf("%s: lint: %s", tc.name, m)
		}
		for _, err := range res.Errors {
			t.Errorf("%s: lint: %v", tc.name, err)
		}
	}
}

// TestChartWebConfig: with TLS and basic auth on, the file --web.config.file
// names is in a mounted Secret (the root filesystem is read-only), and the
// kubelet's probes go to --web.probe-address's port, which answers them
// without credentials; the ServiceMonitor takes the scheme.
func TestChartWebConfig(t *testing.T) {
	objs := mustRenderChart(t, "web: {configSecret: wce-web}\nserviceMonitor: {enabled: true, endpoint: {scheme: https}}")
	dep := find[appsv1.Deployment](t, objs, "Deployment")
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	var file, probeAddr string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--web.config.file="); ok {
			file = v
		}
		if v, ok := strings.CutPrefix(a, "--web.probe-address="); ok {
			probeAddr = v
		}
	}
	if file == "" || probeAddr == "" {
		t.Fatalf("args %q: want --web.config.file and --web.probe-address", c.Args)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == "wce-web" && strings.HasPrefix(file, m.MountPath+"/") {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("%s is in no volume of Secret wce-web: mounts %+v, volumes %+v", file, c.VolumeMounts, pod.Volumes)
	}
	_, port, _ := strings.Cut(probeAddr, ":")
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool {
			return cp.Name == p.HTTPGet.Port.String() && fmt.Sprint(cp.ContainerPort) == port
		}) {
			t.Errorf("%s probe on port %q, want the port of --web.probe-address=%s", name, p.HTTPGet.Port.String(), probeAddr)
		}
	}
	// The exporter accepts these flags once the file is there.
	web := filepath.Join(t.TempDir(), "web-config.yml")
	if err := os.WriteFile(web, []byte("basic_auth_users: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := slices.Clone(c.Args)
	for i, a := range args {
		if strings.HasPrefix(a, "--web.config.file=") {
			args[i] = "--web.config.file=" + web
		}
	}
	if err := daemon.CheckFlags(args); err != nil {
		t.Errorf("the exporter refuses %q: %v", args, err)
	}
	sm := find[monitoringv1.ServiceMonitor](t, objs, "ServiceMonitor")
	if s := sm.Spec.Endpoints[0].Scheme; s == nil || string(*s) != "https" {
		t.Errorf("ServiceMonitor endpoint scheme %v, want https", s)
	}
}
