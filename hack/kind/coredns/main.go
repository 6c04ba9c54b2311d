// Command coredns is CoreDNS with the plugins of kubeadm's Corefile and
// nothing else, for the kind node image (hack/kind): the cluster's DNS
// without the cloud plugins and their dependencies.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() {
	// In plugin.cfg's order, the order in which they see a query.
	dnsserver.Directives = []string{"reload", "ready", "health", "prometheus", "errors", "log", "loadbalance", "cache", "kubernetes", "loop", "forward"}
	coremain.Run()
}
