// Package preflight checks at start that RBAC allows every request the
// exporter will make, so that a missing rule is one clear error at start
// rather than a stream of 403s later.
package preflight

import (
	"context"
	"errors"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
)

// Access is one verb on one object (Name "" for create, which RBAC cannot
// restrict by name, and for list and watch of a collection).
type Access struct {
	Verb, Group, Resource, Namespace, Name string
}

// Check asks the apiserver (SelfSubjectAccessReview, which every
// authenticated user may create) whether each needed request is allowed, and
// returns an error naming each one that is not.
func Check(ctx context.Context, client authorizationv1client.SelfSubjectAccessReviewsGetter, needed []Access) error {
	var verbs []string // in order of first denial
	denied := map[string][]string{}
	for _, a := range needed {
		r, err := client.SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: a.Namespace, Verb: a.Verb, Group: a.Group, Resource: a.Resource, Name: a.Name,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("checking RBAC (create selfsubjectaccessreviews.authorization.k8s.io): %w", err)
		}
		if r.Status.Allowed {
			continue
		}
		what := a.Verb + " " + a.Resource
		if a.Group != "" {
			what += "." + a.Group
		}
		what += " in namespace " + a.Namespace
		if _, ok := denied[what]; !ok {
			verbs = append(verbs, what)
			denied[what] = nil
		}
		if a.Name != "" {
			denied[what] = append(denied[what], a.Name)
		}
	}
	if len(verbs) == 0 {
		return nil
	}
	parts := make([]string, 0, len(verbs))
	for _, v := range verbs {
		if names := denied[v]; len(names) > 0 {
			v += " (" + strings.Join(names, ",") + ")"
		}
		parts = append(parts, v)
	}
	return errors.New("RBAC denies " + strings.Join(parts, "; ") + " (deploy/ has the Role it needs)")
}
