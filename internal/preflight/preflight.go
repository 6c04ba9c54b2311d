// Package preflight checks at start that RBAC allows every request the
// exporter will make, so that a missing rule is one clear error at start
// rather than a stream of 403s later.
package preflight

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/watchcache/watchcache-exporter/internal/kube"
)

// Access is one verb on one object (Name "" for create, which RBAC cannot
// restrict by name, and for list and watch of a collection); Namespace ""
// is cluster-wide.
type Access struct {
	Verb, Group, Resource, Namespace, Name string
}

// Client is what Check asks: both reviews, which every authenticated user
// may create.
type Client = kube.Reviews

// Check returns an error naming each needed request that is not allowed. It
// asks for the rules of each namespace once (SelfSubjectRulesReview), so its
// cost does not grow with the number of objects; only where an authorizer
// cannot list its rules (the review is incomplete) does it ask about the
// unmatched requests one by one (SelfSubjectAccessReview). Cluster-wide
// requests are asked one by one too (a rules review needs a namespace, and
// its rules mix that namespace's RoleBindings in), unless one review of the
// verb on every resource allows them all: --resources=all with its
// ClusterRole then costs two reviews, not two per resource.
func Check(ctx context.Context, client Client, needed []Access) error {
	rules := map[string]*authorizationv1.SubjectRulesReviewStatus{}
	everything, err := allowedEverywhere(ctx, client, needed)
	if err != nil {
		return err
	}
	var denied []Access
	for _, a := range needed {
		if a.Namespace == "" {
			if everything[a.Verb] {
				continue
			}
			allowed, err := review(ctx, client, a)
			if err != nil {
				return err
			}
			if !allowed {
				denied = append(denied, a)
			}
			continue
		}
		st, ok := rules[a.Namespace]
		if !ok {
			r, err := client.CreateRulesReview(ctx, &authorizationv1.SelfSubjectRulesReview{
				Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: a.Namespace},
			})
			if err != nil {
				return fmt.Errorf("checking RBAC (create selfsubjectrulesreviews.authorization.k8s.io): %w", err)
			}
			st = &r.Status
			rules[a.Namespace] = st
		}
		if allows(st.ResourceRules, a) {
			continue
		}
		if st.Incomplete {
			allowed, err := review(ctx, client, a)
			if err != nil {
				return err
			}
			if allowed {
				continue
			}
		}
		denied = append(denied, a)
	}
	return deniedError(denied)
}

// wildcardAfter is how many cluster-wide requests of one verb make it worth
// asking about the verb on every resource first.
const wildcardAfter = 4

// allowedEverywhere says, for each verb of more than wildcardAfter of the
// cluster-wide requests, whether RBAC allows it on every resource of every
// group, cluster-wide.
func allowedEverywhere(ctx context.Context, client Client, needed []Access) (map[string]bool, error) {
	count := map[string]int{}
	for _, a := range needed {
		if a.Namespace == "" {
			count[a.Verb]++
		}
	}
	everything := map[string]bool{}
	for verb, n := range count {
		if n <= wildcardAfter {
			continue
		}
		allowed, err := review(ctx, client, Access{Verb: verb, Group: "*", Resource: "*"})
		if err != nil {
			return nil, err
		}
		everything[verb] = allowed
	}
	return everything, nil
}

// allows says whether one of rules allows a.
func allows(rules []authorizationv1.ResourceRule, a Access) bool {
	for _, r := range rules {
		if matches(r.Verbs, a.Verb) && matches(r.APIGroups, a.Group) && matches(r.Resources, a.Resource) &&
			(len(r.ResourceNames) == 0 || a.Name != "" && slices.Contains(r.ResourceNames, a.Name)) {
			return true
		}
	}
	return false
}

func matches(values []string, v string) bool {
	return slices.Contains(values, "*") || slices.Contains(values, v)
}

func review(ctx context.Context, client Client, a Access) (bool, error) {
	r, err := client.CreateAccessReview(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: a.Namespace, Verb: a.Verb, Group: a.Group, Resource: a.Resource, Name: a.Name,
		}},
	})
	if err != nil {
		return false, fmt.Errorf("checking RBAC (create selfsubjectaccessreviews.authorization.k8s.io): %w", err)
	}
	return r.Status.Allowed, nil
}

// deniedError groups the denials by verb and resource, in order of first
// denial, and names the objects of each.
func deniedError(denied []Access) error {
	if len(denied) == 0 {
		return nil
	}
	var verbs []string
	names := map[string][]string{}
	hint := "deploy/ has the Role it needs"
	for _, a := range denied {
		if a.Namespace == "" {
			hint = "deploy/ has the Role it needs, deploy/components/resources the ClusterRole of --resources"
		}
		what := a.Verb + " " + a.Resource
		if a.Group != "" {
			what += "." + a.Group
		}
		if a.Namespace == "" {
			what += " cluster-wide"
		} else {
			what += " in namespace " + a.Namespace
		}
		if _, ok := names[what]; !ok {
			verbs = append(verbs, what)
			names[what] = nil
		}
		if a.Name != "" {
			names[what] = append(names[what], a.Name)
		}
	}
	parts := make([]string, 0, len(verbs))
	for _, v := range verbs {
		if n := names[v]; len(n) > 0 {
			v += " (" + strings.Join(n, ",") + ")"
		}
		parts = append(parts, v)
	}
	return errors.New("RBAC denies " + strings.Join(parts, "; ") + " (" + hint + ")")
}
