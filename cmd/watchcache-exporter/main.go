// Command watchcache-exporter measures how long the kube-apiserver's watch
// cache keeps its history, and exports it to Prometheus; installed as
// kubectl-watchcache, it is the kubectl plugin of the experiment.
package main

import (
	"os"

	"golang.org/x/term"

	"github.com/watchcache/watchcache-exporter/daemon"
)

func main() {
	ctx, stop := daemon.SignalContext()
	defer stop()
	os.Exit(daemon.Command(ctx, os.Args[0], os.Args[1:], os.Stdout, os.Stderr, term.IsTerminal(int(os.Stderr.Fd()))))
}
