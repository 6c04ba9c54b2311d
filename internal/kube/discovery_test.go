package kube

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// Aggregated discovery as kube-apiserver v1.37 serves it, cut to a core
// resource, a group with two versions (the first preferred) and a group
// whose aggregated apiserver does not answer.
const (
	coreDiscovery = `{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","metadata":{},"items":[
	 {"metadata":{"creationTimestamp":null},"versions":[{"version":"v1","resources":[
	  {"resource":"configmaps","responseKind":{"group":"","version":"v1","kind":"ConfigMap"},"scope":"Namespaced","singularResource":"configmap","verbs":["create","delete","get","list","patch","update","watch"]},
	  {"resource":"pods","responseKind":{"group":"","version":"v1","kind":"Pod"},"scope":"Namespaced","singularResource":"pod","verbs":["get","list","watch"],
	   "subresources":[{"subresource":"status","verbs":["get","patch","update"]}]}],"freshness":"Current"}]}]}`
	groupsDiscovery = `{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","metadata":{},"items":[
	 {"metadata":{"name":"stable.example.com","creationTimestamp":null},"versions":[
	  {"version":"v2","resources":[{"resource":"widgets","scope":"Cluster","singularResource":"widget","verbs":["list","watch"]}],"freshness":"Current"},
	  {"version":"v1","resources":[{"resource":"widgets","scope":"Cluster","singularResource":"widget","verbs":["get"]}],"freshness":"Current"}]},
	 {"metadata":{"name":"metrics.k8s.io","creationTimestamp":null},"versions":[{"version":"v1beta1","freshness":"Stale"}]}]}`
)

func TestServerGroupsAndResources(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != aggregatedDiscovery {
			http.Error(w, "Accept "+r.Header.Get("Accept"), http.StatusNotAcceptable)
			return
		}
		w.Header().Set("Content-Type", aggregatedDiscovery)
		switch r.URL.Path {
		case "/api":
			io.WriteString(w, coreDiscovery)
		case "/apis":
			io.WriteString(w, groupsDiscovery)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c, err := NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	groups, lists, err := c.ServerGroupsAndResources(t.Context())
	var stale *StaleGroupsError
	if !errors.As(err, &stale) || !reflect.DeepEqual(keys(stale.Groups), []schema.GroupVersion{{Group: "metrics.k8s.io", Version: "v1beta1"}}) {
		t.Errorf("error %v, want metrics.k8s.io/v1beta1 named stale", err)
	}
	v := func(gv, version string) metav1.GroupVersionForDiscovery {
		return metav1.GroupVersionForDiscovery{GroupVersion: gv, Version: version}
	}
	wantGroups := []*metav1.APIGroup{
		{Versions: []metav1.GroupVersionForDiscovery{v("v1", "v1")}, PreferredVersion: v("v1", "v1")},
		{Name: "stable.example.com", Versions: []metav1.GroupVersionForDiscovery{v("stable.example.com/v2", "v2"), v("stable.example.com/v1", "v1")},
			PreferredVersion: v("stable.example.com/v2", "v2")},
	}
	if !reflect.DeepEqual(groups, wantGroups) {
		t.Errorf("groups %+v, want %+v", groups, wantGroups)
	}
	wantLists := []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "configmaps", Namespaced: true, Verbs: []string{"create", "delete", "get", "list", "patch", "update", "watch"}},
			{Name: "pods", Namespaced: true, Verbs: []string{"get", "list", "watch"}},
		}},
		{GroupVersion: "stable.example.com/v2", APIResources: []metav1.APIResource{{Name: "widgets", Verbs: []string{"list", "watch"}}}},
		{GroupVersion: "stable.example.com/v1", APIResources: []metav1.APIResource{{Name: "widgets", Verbs: []string{"get"}}}},
	}
	if !reflect.DeepEqual(lists, wantLists) {
		t.Errorf("resources %+v, want %+v", lists, wantLists)
	}
}

// An apiserver older than v1.30 answers /apis with the legacy APIGroupList:
// said so, not read as no groups at all.
func TestServerGroupsAndResourcesLegacy(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"kind":"APIGroupList","apiVersion":"v1","groups":[]}`)
	}))
	defer srv.Close()
	c, err := NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.ServerGroupsAndResources(t.Context()); err == nil || !strings.Contains(err.Error(), `GET /api: the apiserver answered "APIGroupList", not the aggregated discovery`) {
		t.Errorf("error %v, want one that names the legacy answer", err)
	}
}

func keys[K comparable, V any](m map[K]V) []K {
	var out []K
	for k := range m {
		out = append(out, k)
	}
	return out
}
