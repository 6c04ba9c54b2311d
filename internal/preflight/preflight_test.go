package preflight

import (
	"fmt"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/watchcache/watchcache-exporter/test/typed"
)

func TestAllows(t *testing.T) {
	rules := []authorizationv1.ResourceRule{
		{Verbs: []string{"get", "update"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"quiet"}},
		{Verbs: []string{"create"}, APIGroups: []string{""}, Resources: []string{"configmaps"}},
		{Verbs: []string{"*"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"*"}},
	}
	for _, tc := range []struct {
		a    Access
		want bool
	}{
		{Access{Verb: "get", Resource: "configmaps", Name: "quiet"}, true},
		{Access{Verb: "update", Resource: "configmaps", Name: "quiet"}, true},
		{Access{Verb: "get", Resource: "configmaps", Name: "other"}, false},
		{Access{Verb: "get", Resource: "configmaps"}, false}, // a collection: names do not allow it
		{Access{Verb: "delete", Resource: "configmaps", Name: "quiet"}, false},
		{Access{Verb: "create", Resource: "configmaps"}, true},
		{Access{Verb: "create", Resource: "secrets"}, false},
		{Access{Verb: "create", Group: "apps", Resource: "configmaps"}, false},
		{Access{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Name: "x"}, true},
	} {
		if got := allows(rules, tc.a); got != tc.want {
			t.Errorf("allows(%+v) = %v, want %v", tc.a, got, tc.want)
		}
	}
}

func TestDeniedError(t *testing.T) {
	err := deniedError([]Access{
		{Verb: "create", Resource: "configmaps", Namespace: "ns"},
		{Verb: "patch", Resource: "configmaps", Namespace: "ns", Name: "a"},
		{Verb: "patch", Resource: "configmaps", Namespace: "ns", Name: "b"},
		{Verb: "list", Group: "discovery.k8s.io", Resource: "endpointslices", Namespace: "default"},
	})
	want := "RBAC denies create configmaps in namespace ns; patch configmaps in namespace ns (a,b); list endpointslices.discovery.k8s.io in namespace default (deploy/ has the Role it needs)"
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
	err = deniedError([]Access{{Verb: "watch", Group: "coordination.k8s.io", Resource: "leases"}})
	want = "RBAC denies watch leases.coordination.k8s.io cluster-wide (deploy/ has the Role it needs, deploy/components/resources the ClusterRole of --resources)"
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
	if deniedError(nil) != nil {
		t.Error("no denials, an error")
	}
}

// --resources=all on a cluster of 300 resources: where RBAC grants list
// and watch of everything, the check costs two access reviews, not 600;
// where it grants them resource by resource, each is asked, and a missing
// one is named.
func TestCheckManyResources(t *testing.T) {
	var needed []Access
	for i := range 300 {
		for _, verb := range []string{"list", "watch"} {
			needed = append(needed, Access{Verb: verb, Group: fmt.Sprintf("g%d.example.com", i), Resource: "things"})
		}
	}
	for _, tc := range []struct {
		name     string
		allow    func(*authorizationv1.ResourceAttributes) bool
		reviews  int
		deniedOf string
	}{
		{"everything", func(a *authorizationv1.ResourceAttributes) bool { return true }, 2, ""},
		{"one by one", func(a *authorizationv1.ResourceAttributes) bool { return a.Resource != "*" }, 602, ""},
		{"one missing", func(a *authorizationv1.ResourceAttributes) bool {
			return a.Resource != "*" && a.Group != "g7.example.com"
		}, 602, "list things.g7.example.com cluster-wide"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			reviews := 0
			cs.PrependReactor("create", "selfsubjectaccessreviews", func(action clienttesting.Action) (bool, runtime.Object, error) {
				reviews++
				r := action.(clienttesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
				r.Status.Allowed = tc.allow(r.Spec.ResourceAttributes)
				return true, r, nil
			})
			err := Check(t.Context(), typed.Reviews(cs.AuthorizationV1()), needed)
			if reviews != tc.reviews {
				t.Errorf("%d access reviews, want %d", reviews, tc.reviews)
			}
			switch {
			case tc.deniedOf == "" && err != nil:
				t.Errorf("Check: %v, want allowed", err)
			case tc.deniedOf != "" && (err == nil || !strings.Contains(err.Error(), tc.deniedOf)):
				t.Errorf("Check: %v, want %q denied", err, tc.deniedOf)
			}
		})
	}
}
