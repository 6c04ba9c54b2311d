package daemon

import (
	"github.com/watchcache/watchcache-exporter/internal/preflight"
	"github.com/watchcache/watchcache-exporter/resources"
)

// neededAccess lists every request the exporter makes; rs are the resources
// of --resources.
func neededAccess(cfg config, rs []resources.Resource) []preflight.Access {
	cm := func(verb, name string) preflight.Access {
		return preflight.Access{Verb: verb, Resource: "configmaps", Namespace: cfg.namespace, Name: name}
	}
	// list: relists of quiet (selected by name) give the RV to watch from;
	// in passive mode they also give the current RV.
	// get and update: touches read quiet and update it only if it is still
	// the exporter's (patch is the load's verb alone, for APF to tell them
	// apart).
	a := []preflight.Access{cm("create", ""), cm("list", cfg.quietName), cm("get", cfg.quietName), cm("update", cfg.quietName), cm("watch", cfg.quietName), cm("delete", cfg.quietName)}
	if cfg.writes() {
		for _, n := range cfg.loadConfig().Names() {
			a = append(a, cm("get", n), cm("patch", n), cm("delete", n))
		}
	}
	// The Lease: created when missing, read and renewed, and deleted once
	// released on shutdown.
	lease := func(verb, name string) preflight.Access {
		return preflight.Access{Verb: verb, Group: "coordination.k8s.io", Resource: "leases", Namespace: cfg.namespace, Name: name}
	}
	a = append(a, lease("create", ""), lease("get", cfg.quietName), lease("update", cfg.quietName), lease("delete", cfg.quietName))
	if cfg.apiservers == "discover" {
		for _, verb := range []string{"list", "watch"} {
			a = append(a, preflight.Access{Verb: verb, Group: "discovery.k8s.io", Resource: "endpointslices", Namespace: "default"})
		}
	}
	// Every resource's window: a watch (from RV 1) and a list (limit 1, the
	// object count) across all namespaces; for all, the APIServices, to
	// leave out the aggregated apiservers.
	for _, r := range rs {
		for _, verb := range []string{"list", "watch"} {
			a = append(a, preflight.Access{Verb: verb, Group: r.Group, Resource: r.Resource})
		}
	}
	if cfg.resources.All {
		a = append(a, preflight.Access{Verb: "list", Group: "apiregistration.k8s.io", Resource: "apiservices"})
	}
	return a
}
