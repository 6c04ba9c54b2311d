package preflight

import (
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
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
