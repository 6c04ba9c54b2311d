package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// aggregatedDiscovery asks /api and /apis for every group's versions and
// resources at once (GA since v1.30): two requests however many CRDs.
const aggregatedDiscovery = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// StaleGroupsError names the group versions whose discovery failed (an
// aggregated apiserver that does not answer); the others were read.
type StaleGroupsError struct {
	Groups map[schema.GroupVersion]error
}

func (e *StaleGroupsError) Error() string {
	var gvs []string
	for gv := range e.Groups {
		gvs = append(gvs, gv.String())
	}
	sort.Strings(gvs)
	return "discovery failed for " + strings.Join(gvs, ", ")
}

// ServerGroupsAndResources is every group the apiserver serves, and the
// resources of each of its versions, as client-go's discovery client gives
// them: the first version of a group is its preferred one. A group version
// whose discovery failed is left out and named in a *StaleGroupsError.
func (c *Client) ServerGroupsAndResources(ctx context.Context) ([]*metav1.APIGroup, []*metav1.APIResourceList, error) {
	var groups []*metav1.APIGroup
	var lists []*metav1.APIResourceList
	stale := map[schema.GroupVersion]error{}
	for _, path := range []string{"/api", "/apis"} {
		body, err := c.core.Get().AbsPath(path).SetHeader("Accept", aggregatedDiscovery).Do(ctx).Raw()
		if err != nil {
			return nil, nil, fmt.Errorf("GET %s: %w", path, err)
		}
		var l apidiscoveryv2.APIGroupDiscoveryList
		if err := json.Unmarshal(body, &l); err != nil {
			return nil, nil, fmt.Errorf("GET %s: %w", path, err)
		}
		if l.Kind != "APIGroupDiscoveryList" {
			return nil, nil, fmt.Errorf("GET %s: the apiserver answered %q, not the aggregated discovery of Kubernetes v1.30 and later", path, l.Kind)
		}
		for _, g := range l.Items {
			group := &metav1.APIGroup{Name: g.Name}
			for _, v := range g.Versions {
				gv := schema.GroupVersion{Group: g.Name, Version: v.Version}
				if v.Freshness == apidiscoveryv2.DiscoveryFreshnessStale {
					stale[gv] = fmt.Errorf("%s: stale discovery (an aggregated apiserver that does not answer)", gv)
					continue
				}
				gvd := metav1.GroupVersionForDiscovery{GroupVersion: gv.String(), Version: v.Version}
				group.Versions = append(group.Versions, gvd)
				list := &metav1.APIResourceList{GroupVersion: gv.String()}
				for _, r := range v.Resources {
					list.APIResources = append(list.APIResources, metav1.APIResource{
						Name: r.Resource, Namespaced: r.Scope == apidiscoveryv2.ScopeNamespace, Verbs: r.Verbs,
					})
				}
				lists = append(lists, list)
			}
			if len(group.Versions) > 0 {
				group.PreferredVersion = group.Versions[0]
				groups = append(groups, group)
			}
		}
	}
	if len(stale) > 0 {
		return groups, lists, &StaleGroupsError{Groups: stale}
	}
	return groups, lists, nil
}
