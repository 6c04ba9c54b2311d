// Command watchcache-exporter measures how long the kube-apiserver's watch
// cache keeps its history, and exports it to Prometheus; installed as
// kubectl-watchcache, it is the kubectl plugin of the experiment.
package main

import (
	"os"
	"runtime"

	"golang.org/x/term"

	"github.com/watchcache/watchcache-exporter/daemon"
)

func main() {
	// One P unless GOMAXPROCS says otherwise (the runtime's own default is
	// at least 2): the exporter waits on the network, a few percent of a
	// core, and with two Ps each answer woke an idle thread that spun
	// looking for work. At 100 writes/s: 2.3% of a core instead of 2.8-3.1%.
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	ctx, stop := daemon.SignalContext()
	defer stop()
	os.Exit(daemon.Command(ctx, os.Args[0], os.Args[1:], os.Stdout, os.Stderr, term.IsTerminal(int(os.Stderr.Fd()))))
}
