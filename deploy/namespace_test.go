package deploy_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// deploy/examples/other-namespace moves every namespace the objects name,
// not only their own: the Namespace, RoleBinding and ClusterRoleBinding
// subjects and the FlowSchema's subject, or the exporter loses its Role and
// its load silently leaves its priority level.
func TestKustomizeOtherNamespace(t *testing.T) {
	const other = "team-x" // the example's
	objs := renderExample(t, "other-namespace", components...)
	for _, o := range objs {
		var found []string
		walkNamespaces(o.Object, "", &found)
		if o.GetKind() == "Namespace" {
			found = append(found, "/metadata/name="+o.GetName())
		}
		for _, f := range found {
			if !strings.HasSuffix(f, "="+other) && !strings.HasSuffix(f, "=*") {
				t.Errorf("%s %s: %s, want %s", o.GetKind(), o.GetName(), f, other)
			}
		}
	}
	if !slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == "FlowSchema" }) {
		t.Fatal("no FlowSchema rendered")
	}
	// kustomize's own `namespace:` moves the FlowSchema's subject as well
	// (the apf component's configuration).
	for _, o := range renderIn(t, other, "apf") {
		if o.GetKind() != "FlowSchema" {
			continue
		}
		var found []string
		walkNamespaces(o.Object, "", &found)
		if !slices.Contains(found, "/spec/rules[]/subjects[]/serviceAccount/namespace="+other) {
			t.Errorf("with namespace: %s, the FlowSchema's namespaces are %q", other, found)
		}
	}
}

// walkNamespaces collects path=value for every field named namespace or
// namespaces (each element) under v.
func walkNamespaces(v any, path string, out *[]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, c := range v {
			p := path + "/" + k
			switch s := c.(type) {
			case string:
				if k == "namespace" {
					*out = append(*out, p+"="+s)
				}
			case []any:
				if k == "namespaces" {
					for _, e := range s {
						*out = append(*out, fmt.Sprintf("%s=%v", p, e))
					}
					continue
				}
			}
			walkNamespaces(c, p, out)
		}
	case []any:
		for _, c := range v {
			walkNamespaces(c, path+"[]", out)
		}
	}
}
