// Command watchcache-exporter measures how long the kube-apiserver's watch
// cache keeps its history, and exports it to Prometheus.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/watchcache/watchcache-exporter/daemon"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(daemon.Run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
