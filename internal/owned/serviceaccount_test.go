package owned

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/watchcache/watchcache-exporter/test/typed"
)

func TestServiceAccountRef(t *testing.T) {
	for _, tc := range []struct {
		user string
		uid  string
		want *metav1.OwnerReference
	}{
		{"system:serviceaccount:ns:exporter", "u-1", &metav1.OwnerReference{APIVersion: "v1", Kind: "ServiceAccount", Name: "exporter", UID: types.UID("u-1")}},
		// Another namespace's account cannot own objects here: the garbage
		// collector would take the reference as dangling and delete them.
		{"system:serviceaccount:other:exporter", "u-1", nil},
		{"system:serviceaccount:ns:exporter", "", nil},
		{"system:serviceaccount:ns:", "u-1", nil},
		{"system:serviceaccount:ns:a:b", "u-1", nil},
		{"kubernetes-admin", "u-1", nil},
		{"system:node:ns", "u-1", nil},
	} {
		got := serviceAccountRef(authenticationv1.UserInfo{Username: tc.user, UID: tc.uid}, "ns")
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (uid %q): (-want +got)\n%s", tc.user, tc.uid, diff)
		}
	}
}

// TestOwnedBy: the objects the Store creates after OwnedBy carry the owner
// reference; Ensure and Relist create them.
func TestOwnedBy(t *testing.T) {
	s, cs, _, _ := newTestStore(t)
	ctx := t.Context()
	c := typed.Core(cs.CoreV1())
	if _, _, err := s.Ensure(ctx, c, "before", RoleNoise); err != nil {
		t.Fatal(err)
	}
	ref := metav1.OwnerReference{APIVersion: "v1", Kind: "ServiceAccount", Name: "exporter", UID: "u-1"}
	s.OwnedBy(ref)
	if _, _, err := s.Ensure(ctx, c, "noise", RoleNoise); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Relist(ctx, c, "quiet", RoleQuiet); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]metav1.OwnerReference{"before": nil, "noise": {ref}, "quiet": {ref}} {
		cm, err := cs.CoreV1().ConfigMaps("ns").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, cm.OwnerReferences); diff != "" {
			t.Errorf("%s: owner references (-want +got)\n%s", name, diff)
		}
	}
}
