package testcluster

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// CRDs is the resource of CustomResourceDefinitions, for a dynamic client.
var CRDs = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// CRD is a namespaced CustomResourceDefinition of group and plural (lower
// case, ending in s; its kind is the singular, capitalised) that accepts any
// object: many resources, cheaply, for tests and the bench.
func CRD(group, plural string) *unstructured.Unstructured {
	singular := strings.TrimSuffix(plural, "s")
	kind := strings.ToUpper(singular[:1]) + singular[1:]
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": plural + "." + group},
		"spec": map[string]any{
			"group": group, "scope": "Namespaced",
			"names": map[string]any{"plural": plural, "singular": singular, "kind": kind, "listKind": kind + "List"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
}

// ServedListWatch counts the resources discovery serves with list and watch,
// subresources left out: what --resources=all measures.
func ServedListWatch(disc discovery.DiscoveryInterface) (int, error) {
	lists, err := disc.ServerPreferredResources()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, l := range lists {
		for _, r := range l.APIResources {
			if !strings.Contains(r.Name, "/") && slices.Contains(r.Verbs, "list") && slices.Contains(r.Verbs, "watch") {
				n++
			}
		}
	}
	return n, nil
}
