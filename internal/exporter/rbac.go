package exporter

import (
	"context"
	"errors"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// access is one verb on one object (name "" for create, which RBAC cannot
// restrict by name, and for list and watch of a collection).
type access struct {
	verb, group, resource, ns, name string
}

// neededAccess lists every request the exporter makes.
func neededAccess(cfg config) []access {
	cm := func(verb, name string) access { return access{verb, "", "configmaps", cfg.namespace, name} }
	// list: relists of quiet (selected by name) give the RV to watch from;
	// in passive mode they also give the current RV.
	a := []access{cm("create", ""), cm("list", cfg.quietName), cm("patch", cfg.quietName), cm("watch", cfg.quietName), cm("delete", cfg.quietName)}
	if cfg.schedule.Max() > 0 {
		for _, n := range cfg.loadConfig().Names() {
			a = append(a, cm("get", n), cm("patch", n), cm("delete", n))
		}
	}
	if cfg.apiservers == "discover" {
		for _, verb := range []string{"list", "watch"} {
			a = append(a, access{verb, "discovery.k8s.io", "endpointslices", "default", ""})
		}
	}
	return a
}

// checkAccess asks the apiserver (SelfSubjectAccessReview, which every
// authenticated user may create) whether each needed request is allowed, and
// returns an error naming each one that is not.
func checkAccess(ctx context.Context, cs kubernetes.Interface, needed []access) error {
	var verbs []string // in order of first denial
	denied := map[string][]string{}
	for _, a := range needed {
		r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: a.ns, Verb: a.verb, Group: a.group, Resource: a.resource, Name: a.name,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("checking RBAC (create selfsubjectaccessreviews.authorization.k8s.io): %w", err)
		}
		if !r.Status.Allowed {
			what := a.verb + " " + a.resource
			if a.group != "" {
				what += "." + a.group
			}
			what += " in namespace " + a.ns
			if _, ok := denied[what]; !ok {
				verbs = append(verbs, what)
				denied[what] = nil
			}
			if a.name != "" {
				denied[what] = append(denied[what], a.name)
			}
		}
	}
	if len(verbs) == 0 {
		return nil
	}
	var parts []string
	for _, v := range verbs {
		p := v
		if names := denied[v]; len(names) > 0 {
			p += " (" + strings.Join(names, ",") + ")"
		}
		parts = append(parts, p)
	}
	return errors.New("RBAC denies " + strings.Join(parts, "; ") + " (deploy/ has the Role it needs)")
}
