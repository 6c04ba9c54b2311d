package daemon

import "github.com/watchcache/watchcache-exporter/internal/preflight"

// neededAccess lists every request the exporter makes.
func neededAccess(cfg config) []preflight.Access {
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
	return a
}
