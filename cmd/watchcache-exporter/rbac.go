package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// access is one verb on one ConfigMap (name "" for create, which RBAC cannot
// restrict by name).
type access struct{ verb, name string }

// neededAccess lists every request the exporter makes.
func neededAccess(cfg config) []access {
	a := []access{
		{"create", ""},
		{"get", cfg.quietName},
		{"patch", cfg.quietName},
		{"watch", cfg.quietName},
		{"delete", cfg.quietName},
	}
	if cfg.loadRate > 0 {
		for _, n := range cfg.loadConfig().Names() {
			a = append(a, access{"get", n}, access{"patch", n}, access{"delete", n})
		}
	}
	return a
}

// checkAccess asks the apiserver (SelfSubjectAccessReview, which every
// authenticated user may create) whether each needed request is allowed, and
// returns an error naming each one that is not.
func checkAccess(ctx context.Context, cs kubernetes.Interface, ns string, needed []access) error {
	var verbs []string // in order of first denial
	denied := map[string][]string{}
	for _, a := range needed {
		r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: a.verb, Resource: "configmaps", Name: a.name,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("checking RBAC (create selfsubjectaccessreviews.authorization.k8s.io): %w", err)
		}
		if !r.Status.Allowed {
			if _, ok := denied[a.verb]; !ok {
				verbs = append(verbs, a.verb)
			}
			if a.name != "" {
				denied[a.verb] = append(denied[a.verb], a.name)
			} else {
				denied[a.verb] = denied[a.verb][:0:0]
			}
		}
	}
	if len(verbs) == 0 {
		return nil
	}
	var parts []string
	for _, v := range verbs {
		p := v + " configmaps"
		if names := denied[v]; len(names) > 0 {
			p += " " + strings.Join(names, ",")
		}
		parts = append(parts, p)
	}
	return errors.New("RBAC denies " + strings.Join(parts, "; ") + " in namespace " + ns + " (deploy/ has the Role it needs)")
}
