// Package e2e holds the checks of the exporter deployed from deploy/ or the
// chart into a real cluster, which the kind tests (test/kind, make e2e) use.
package e2e

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/yaml"

	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

// The names deploy/ gives.
const (
	Namespace  = "watchcache-exporter"
	Deployment = "watchcache-exporter"
	Quiet      = "watchcache-quiet"
	PodLabels  = "app.kubernetes.io/name=watchcache-exporter"
	// Marks is the label on everything the exporter writes (owned.ManagedByLabel).
	Marks = "app.kubernetes.io/managed-by=watchcache-exporter"
	// PartOf is the label kustomize puts on every object of deploy/.
	PartOf = "app.kubernetes.io/part-of=watchcache-exporter"
)

// Cluster is a cluster to deploy to: a kubeconfig for kubectl and the same
// credentials for client-go.
type Cluster struct {
	Kubectl    string
	Kubeconfig string
	Config     *rest.Config
	CS         kubernetes.Interface
}

// Run runs kubectl against the cluster and returns its output.
func (c Cluster) Run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(c.Kubectl, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Root is the repository's top folder, from a test's working directory.
func Root(t *testing.T) string {
	t.Helper()
	root, err := testcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// ImageTag reads the tag of the image an archive of `make image` carries.
func ImageTag(t *testing.T, archive string) string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s: no manifest.json: %v", archive, err)
		}
		if h.Name != "manifest.json" {
			continue
		}
		var m []struct{ RepoTags []string }
		if err := json.NewDecoder(tr).Decode(&m); err != nil || len(m) != 1 || len(m[0].RepoTags) != 1 {
			t.Fatalf("%s: manifest.json %v: %v", archive, m, err)
		}
		ref := m[0].RepoTags[0]
		return ref[strings.LastIndex(ref, ":")+1:]
	}
}

// Overlay writes a kustomization of deploy/base with the given components
// and the image tag, as a user's overlay would be, and returns its folder.
func Overlay(t *testing.T, tag string, components ...string) string {
	t.Helper()
	root := Root(t)
	dir := t.TempDir()
	rel := func(p string) string {
		r, err := filepath.Rel(dir, filepath.Join(root, "deploy", p))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	k := types.Kustomization{
		TypeMeta:  types.TypeMeta{APIVersion: types.KustomizationVersion, Kind: types.KustomizationKind},
		Resources: []string{rel("base")},
		// The marshaller quotes what YAML would misread, such as a tag
		// of digits only (a short hash from `git describe`).
		Images: []types.Image{{Name: "watchcache-exporter", NewName: "ghcr.io/watchcache/watchcache-exporter", NewTag: tag}},
	}
	for _, c := range components {
		k.Components = append(k.Components, rel(filepath.Join("components", c)))
	}
	b, err := yaml.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Deployed is what Apply saw.
type Deployed struct {
	Pod *corev1.Pod
	// Ready is from kubectl apply to the pod's Ready condition.
	Ready time.Duration
}

// Apply applies the overlay, waits for the rollout, and checks the pod: Ready
// under the restricted Pod Security level, authenticated by its projected
// ServiceAccount token through in-cluster config (no kubeconfig given), and
// holding the Lease.
func (c Cluster) Apply(t *testing.T, overlay string) Deployed {
	t.Helper()
	start := time.Now()
	c.Run(t, "apply", "-k", overlay)
	c.Run(t, "-n", Namespace, "rollout", "status", "deployment/"+Deployment, "--timeout=3m")
	pod := c.readyPod(t, "", 3*time.Minute)
	d := Deployed{Pod: pod, Ready: time.Since(start)}

	ns, err := c.CS.CoreV1().Namespaces().Get(t.Context(), Namespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lvl := ns.Labels["pod-security.kubernetes.io/enforce"]; lvl != "restricted" {
		t.Errorf("namespace %s enforces Pod Security %q, want restricted", Namespace, lvl)
	}
	token := false
	for _, v := range pod.Spec.Volumes {
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				token = token || s.ServiceAccountToken != nil
			}
		}
	}
	if !token || pod.Spec.ServiceAccountName != "watchcache-exporter" {
		t.Errorf("pod %s: service account %q, projected token volume %v", pod.Name, pod.Spec.ServiceAccountName, token)
	}
	for _, a := range pod.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--kubeconfig") {
			t.Errorf("pod %s is given %s: it must use in-cluster config", pod.Name, a)
		}
	}
	// The exporter acts as its ServiceAccount: it holds the Lease, which
	// only that account's Role lets it take.
	c.WaitLeader(t, pod.Name, 2*time.Minute)
	return d
}

// readyPod waits for exactly one exporter pod, not named except, Running
// and Ready, and returns it.
func (c Cluster) readyPod(t *testing.T, except string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		pods, err := c.CS.CoreV1().Pods(Namespace).List(t.Context(), metav1.ListOptions{LabelSelector: PodLabels})
		if err != nil {
			t.Fatal(err)
		}
		var ready []corev1.Pod
		last = ""
		for _, p := range pods.Items {
			last += fmt.Sprintf(" %s:%s", p.Name, p.Status.Phase)
			if p.Name == except || p.DeletionTimestamp != nil {
				continue
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					ready = append(ready, p)
				}
			}
		}
		if len(ready) == 1 {
			return &ready[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no single Ready exporter pod after %s (pods:%s)", timeout, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// Leader is the pod that holds the Lease, or "". The holder's identity is
// the pod's name, an underscore and a random suffix (leader.Identity).
func (c Cluster) Leader(t *testing.T) string {
	t.Helper()
	l, err := c.CS.CoordinationV1().Leases(Namespace).Get(t.Context(), Quiet, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return Holder(l)
}

// Holder is the pod that holds l, or "".
func Holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	pod, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
	return pod
}

// WaitLeader waits until pod holds the Lease.
func (c Cluster) WaitLeader(t *testing.T, pod string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		h := c.Leader(t)
		if h == pod {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Lease %s/%s held by %q after %s, want %s", Namespace, Quiet, h, timeout, pod)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// Objects are the exporter's ConfigMaps by name, with their UIDs.
func (c Cluster) Objects(t *testing.T) map[string]string {
	t.Helper()
	cms, err := c.CS.CoreV1().ConfigMaps(Namespace).List(t.Context(), metav1.ListOptions{LabelSelector: Marks})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, cm := range cms.Items {
		out[cm.Name] = string(cm.UID)
	}
	return out
}

// Handover is what DeletePod saw.
type Handover struct {
	Old, New *corev1.Pod
	// Leading is from the delete to the new pod holding the Lease.
	Leading time.Duration
}

// DeletePod deletes the leading pod as a node drain or a user would, and
// checks the handover: the replacement takes the Lease once the old pod has
// cleaned up and released it, and the objects the new leader writes are
// still there, with the same UIDs, after the old pod is gone; the new pod
// stays Ready (it is not, with an object lost).
func (c Cluster) DeletePod(t *testing.T, old *corev1.Pod) Handover {
	t.Helper()
	before := c.Objects(t)
	start := time.Now()
	if err := c.CS.CoreV1().Pods(Namespace).Delete(t.Context(), old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := c.readyPod(t, old.Name, 3*time.Minute)
	c.WaitLeader(t, pod.Name, 3*time.Minute)
	h := Handover{Old: old, New: pod, Leading: time.Since(start)}
	for {
		_, err := c.CS.CoreV1().Pods(Namespace).Get(t.Context(), old.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("old pod %s still there 2 minutes after its deletion: %v", old.Name, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	objs := c.Objects(t)
	if _, ok := objs[Quiet]; !ok || len(objs) < 2 || !slices.Equal(slices.Sorted(maps.Keys(objs)), slices.Sorted(maps.Keys(before))) {
		t.Fatalf("after the handover the exporter's objects are %v, want the quiet ConfigMap and the noise ones, as before: %v", objs, before)
	}
	// Long enough for a late cleanup of the old pod to show, and for the
	// new one's 30 s recheck of its objects.
	time.Sleep(35 * time.Second)
	if after := c.Objects(t); fmt.Sprint(after) != fmt.Sprint(objs) {
		t.Errorf("the exporter's objects changed after the handover: %v, then %v", objs, after)
	}
	if p := c.readyPod(t, old.Name, 0); p.Name != pod.Name {
		t.Errorf("Ready pod %s, want %s", p.Name, pod.Name)
	}
	if l := c.Leader(t); l != pod.Name {
		t.Errorf("Lease held by %q, want %s", l, pod.Name)
	}
	return h
}

// Delete runs kubectl delete -k and checks that nothing of deploy/ or of
// what the exporter wrote is left anywhere in the cluster: every resource
// that can be listed is searched for the exporter's and kustomize's labels.
func (c Cluster) Delete(t *testing.T, overlay string) {
	t.Helper()
	c.Run(t, "delete", "-k", overlay, "--wait=true", "--timeout=3m")
	deadline := time.Now().Add(3 * time.Minute)
	for {
		_, err := c.CS.CoreV1().Namespaces().Get(t.Context(), Namespace, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("namespace %s not gone 3 minutes after kubectl delete: %v", Namespace, err)
		}
		time.Sleep(time.Second)
	}
	for _, o := range c.Leftovers(t, Marks, PartOf) {
		t.Errorf("left after kubectl delete -k: %s", o)
	}
}

// Leftovers searches every resource that can be listed, in every namespace,
// for objects with any of the label selectors, and names them.
func (c Cluster) Leftovers(t *testing.T, selectors ...string) []string {
	t.Helper()
	cfg := rest.CopyConfig(c.Config)
	cfg.WarningHandler = rest.NoWarnings{} // deprecated kinds, listed too
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lists, err := dc.ServerPreferredResources()
	if err != nil {
		t.Fatal(err)
	}
	searched := 0
	var left []string
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			searched++
			for _, sel := range selectors {
				res, err := dyn.Resource(gv.WithResource(r.Name)).List(t.Context(), metav1.ListOptions{LabelSelector: sel})
				if err != nil {
					t.Errorf("list %s %s: %v", r.Name, gv, err)
					continue
				}
				for _, o := range res.Items {
					left = append(left, fmt.Sprintf("%s %s/%s (%s)", r.Kind, o.GetNamespace(), o.GetName(), sel))
				}
			}
		}
	}
	t.Logf("%d objects labelled %s in %d resources", len(left), strings.Join(selectors, " or "), searched)
	return left
}

// OwnedByServiceAccount checks that the exporter's ConfigMaps and Lease in
// ns are owned by its ServiceAccount sa, so that deleting sa (helm
// uninstall) has the garbage collector delete them.
func OwnedByServiceAccount(t *testing.T, cs kubernetes.Interface, ns, sa string) {
	t.Helper()
	acct, err := cs.CoreV1().ServiceAccounts(ns).Get(t.Context(), sa, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []metav1.OwnerReference{{APIVersion: "v1", Kind: "ServiceAccount", Name: sa, UID: acct.UID}}
	cms, err := cs.CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{LabelSelector: Marks})
	if err != nil {
		t.Fatal(err)
	}
	leases, err := cs.CoordinationV1().Leases(ns).List(t.Context(), metav1.ListOptions{LabelSelector: Marks})
	if err != nil {
		t.Fatal(err)
	}
	if len(cms.Items) < 1 || len(leases.Items) != 1 {
		t.Fatalf("%d ConfigMaps and %d Leases of the exporter's in %s, want the quiet one at least and one Lease", len(cms.Items), len(leases.Items), ns)
	}
	metas := []metav1.ObjectMeta{leases.Items[0].ObjectMeta}
	for _, cm := range cms.Items {
		metas = append(metas, cm.ObjectMeta)
	}
	for _, m := range metas {
		if !reflect.DeepEqual(m.OwnerReferences, want) {
			t.Errorf("%s/%s: owner references %+v, want %+v", ns, m.Name, m.OwnerReferences, want)
		}
	}
}
