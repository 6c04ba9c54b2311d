// Package resources is the process-wide part of measuring every resource's
// window: which resources --resources names (or all of them, from
// discovery), and how many objects each holds, the cost of a relist. The
// windows themselves are per apiserver (collector.ResourceWindows).
package resources

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"

	"github.com/watchcache/watchcache-exporter/internal/kube"
)

// Resource is one resource type the apiserver serves with list and watch.
type Resource struct {
	Group, Version, Resource string
	Namespaced               bool
}

// Name is how --resources and the logs name it: resource.group, or the
// resource alone for the core group.
func (r Resource) Name() string { return r.Key().String() }

// Key is the resource without its version: one watch cache.
func (r Resource) Key() Name { return Name{Group: r.Group, Resource: r.Resource} }

// GVR is what the dynamic client takes.
func (r Resource) GVR() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource}
}

// Name is a resource named on the command line, without its version: the
// watch cache is one per group and resource, whatever the version.
type Name struct{ Group, Resource string }

func (n Name) String() string {
	if n.Group == "" {
		return n.Resource
	}
	return n.Resource + "." + n.Group
}

// All is the --resources value for every resource.
const All = "all"

// Spec is a parsed --resources: All, or the names.
type Spec struct {
	All   bool
	Names []Name
}

// Empty says whether no resource is asked for.
func (s Spec) Empty() bool { return !s.All && len(s.Names) == 0 }

// ParseSpec reads --resources: "all", or a comma-separated list of
// resource.group names (pods, leases.coordination.k8s.io, ...).
func ParseSpec(s string) (Spec, error) {
	if s == "" {
		return Spec{}, nil
	}
	if s == All {
		return Spec{All: true}, nil
	}
	var spec Spec
	seen := sets.New[Name]()
	for _, raw := range strings.Split(s, ",") {
		n, err := parseName(strings.TrimSpace(raw))
		if err != nil {
			return Spec{}, err
		}
		if seen.Has(n) {
			return Spec{}, fmt.Errorf("%q is listed twice", raw)
		}
		seen.Insert(n)
		spec.Names = append(spec.Names, n)
	}
	return spec, nil
}

func parseName(s string) (Name, error) {
	switch {
	case s == All:
		return Name{}, errors.New(`"all" stands alone: it already names every resource`)
	case s == "":
		return Name{}, errors.New("an empty name")
	case strings.Contains(s, "/"):
		return Name{}, fmt.Errorf("%q: subresources have no watch cache of their own; name the resource", s)
	}
	res, group, _ := strings.Cut(s, ".")
	if msgs := validation.IsDNS1123Label(res); len(msgs) > 0 {
		return Name{}, fmt.Errorf("%q: want resource or resource.group, in lower case and plural (pods, leases.coordination.k8s.io): %s", s, strings.Join(msgs, "; "))
	}
	if group != "" {
		if msgs := validation.IsDNS1123Subdomain(group); len(msgs) > 0 {
			return Name{}, fmt.Errorf("%q: group %q: %s", s, group, strings.Join(msgs, "; "))
		}
	}
	return Name{Group: group, Resource: res}, nil
}

// Discovery is what Resolve reads: every group the apiserver serves, and the
// resources of each version (kube.Client).
type Discovery interface {
	ServerGroupsAndResources(ctx context.Context) ([]*metav1.APIGroup, []*metav1.APIResourceList, error)
}

// Resolve finds the version and scope of each resource spec names, from
// discovery; for All, every resource served with list and watch, without
// subresources and without the groups aggregated apiservers serve (they
// have no watch cache of this apiserver's). A name the apiserver does not
// serve, or serves without list or watch, is an error that names it; the
// resources returned with it are those it does serve. Only when discovery
// itself fails are they nil.
func Resolve(ctx context.Context, disc Discovery, dyn dynamic.Interface, spec Spec) ([]Resource, error) {
	if spec.Empty() {
		return nil, nil
	}
	groups, lists, err := disc.ServerGroupsAndResources(ctx)
	if err != nil && len(lists) == 0 {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	// A failed group (an aggregated apiserver down) leaves the others usable;
	// it is an error only when a named resource is in it.
	var failed map[schema.GroupVersion]error
	var gd *kube.StaleGroupsError
	if errors.As(err, &gd) {
		failed = gd.Groups
	} else if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	preferred := map[string]string{}
	for _, g := range groups {
		preferred[g.Name] = g.PreferredVersion.Version
	}
	found := map[Name]Resource{}
	listWatch := map[Name]bool{}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") {
				continue
			}
			n := Name{Group: gv.Group, Resource: r.Name}
			if old, ok := found[n]; ok && old.Version == preferred[gv.Group] {
				continue // the preferred version wins
			}
			found[n] = Resource{Group: gv.Group, Version: gv.Version, Resource: r.Name, Namespaced: r.Namespaced}
			listWatch[n] = slices.Contains(r.Verbs, "list") && slices.Contains(r.Verbs, "watch")
		}
	}
	if spec.All {
		aggregated, err := aggregatedGroups(ctx, dyn)
		if err != nil {
			return nil, err
		}
		out := []Resource{}
		for n, r := range found {
			if listWatch[n] && !aggregated.Has(n.Group) {
				out = append(out, r)
			}
		}
		sortResources(out)
		return out, nil
	}
	out := []Resource{} // not nil: discovery answered
	var errs []error
	for _, n := range spec.Names {
		r, ok := found[n]
		switch {
		case !ok:
			err := fmt.Errorf("%s: the apiserver serves no such resource (kubectl api-resources lists those it does): %w", n, ErrNotServed)
			for gv, e := range failed {
				if gv.Group == n.Group {
					err = fmt.Errorf("%s: discovery of %s failed: %v: %w", n, gv, e, ErrNotServed)
				}
			}
			errs = append(errs, err)
		case !listWatch[n]:
			errs = append(errs, fmt.Errorf("%s: served without list and watch, so it has no watch cache", n))
		default:
			out = append(out, r)
		}
	}
	return out, errors.Join(errs...)
}

// ErrNotServed is Resolve's error for a resource named that the apiserver
// does not serve now: a CRD not installed yet, or a group whose discovery
// failed. It may be served later.
var ErrNotServed = errors.New("not served now")

// OnlyNotServed says whether every error joined in err is ErrNotServed.
func OnlyNotServed(err error) bool {
	if err == nil {
		return false
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !errors.Is(e, ErrNotServed) {
				return false
			}
		}
		return true
	}
	return errors.Is(err, ErrNotServed)
}

// aggregatedGroups are the groups of APIServices served by an aggregated
// apiserver (spec.service set), not by the kube-apiserver itself.
func aggregatedGroups(ctx context.Context, dyn dynamic.Interface) (sets.Set[string], error) {
	l, err := dyn.Resource(schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}).
		List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("--resources=all: list apiservices.apiregistration.k8s.io, to leave out aggregated apiservers: %w", err)
	}
	out := sets.New[string]()
	for _, s := range l.Items {
		if svc, _, _ := unstructured.NestedMap(s.Object, "spec", "service"); svc != nil {
			g, _, _ := unstructured.NestedString(s.Object, "spec", "group")
			out.Insert(g)
		}
	}
	return out, nil
}

func sortResources(rs []Resource) {
	slices.SortFunc(rs, func(a, b Resource) int {
		return strings.Compare(a.Group+"/"+a.Resource, b.Group+"/"+b.Resource)
	})
}
