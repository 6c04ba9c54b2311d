// Command pause is the sandbox ("pause") container of the kind node's pods:
// it holds the pod's namespaces, reaps the zombies it inherits, and exits on
// SIGINT or SIGTERM. It is built into an image by hack/image, as the
// exporter is, so that the node needs no registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
