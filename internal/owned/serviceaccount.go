package owned

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// ServiceAccountOwner returns an owner reference to the ServiceAccount the
// exporter authenticates as, when that ServiceAccount is in namespace; nil
// for any other identity (a person's kubeconfig, or a ServiceAccount of
// another namespace, which cannot own objects here). With it on the
// exporter's objects, deleting the ServiceAccount (helm uninstall, kubectl
// delete) has the garbage collector delete them, also when the pod could not:
// its RBAC goes in the same breath as its Deployment, or it was killed.
//
// It asks the apiserver who the exporter is (a SelfSubjectReview, which
// every authenticated user may create): for a ServiceAccount token the
// answer carries the account's name and UID, so that no read access to
// ServiceAccounts is needed.
func ServiceAccountOwner(ctx context.Context, c rest.Interface, namespace string) (*metav1.OwnerReference, error) {
	body, err := c.Post().AbsPath("/apis/authentication.k8s.io/v1/selfsubjectreviews").
		SetHeader("Content-Type", "application/json").SetHeader("Accept", "application/json").
		Body([]byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)).
		Do(ctx).Raw()
	if err != nil {
		return nil, fmt.Errorf("selfsubjectreview: %w", err)
	}
	var r authenticationv1.SelfSubjectReview
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("selfsubjectreview: %w", err)
	}
	return serviceAccountRef(r.Status.UserInfo, namespace), nil
}

// serviceAccountRef is the owner reference of u when u is a ServiceAccount
// of namespace with a UID.
func serviceAccountRef(u authenticationv1.UserInfo, namespace string) *metav1.OwnerReference {
	rest, ok := strings.CutPrefix(u.Username, "system:serviceaccount:")
	if !ok || u.UID == "" {
		return nil
	}
	ns, name, ok := strings.Cut(rest, ":")
	if !ok || ns != namespace || name == "" || strings.Contains(name, ":") {
		return nil
	}
	return &metav1.OwnerReference{APIVersion: "v1", Kind: "ServiceAccount", Name: name, UID: types.UID(u.UID)}
}

// OwnedBy makes ref the owner of every object the Store creates from now
// on; set it before the Store is used.
func (s *Store) OwnedBy(ref metav1.OwnerReference) { s.refs = []metav1.OwnerReference{ref} }
