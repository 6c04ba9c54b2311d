package daemon

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// PluginName is the binary's name as a kubectl plugin: kubectl runs
// `kubectl watchcache ...` as `kubectl-watchcache ...`.
const PluginName = "kubectl-watchcache"

const pluginUsage = `Usage: kubectl watchcache experiment [flags]

Measures how long the kube-apiserver's watch cache keeps a resourceVersion
on the cluster of the kubeconfig's current context (or --context), in the
context's namespace (or -n), in one run that cleans up after itself. See
kubectl watchcache experiment --help.

The same binary, run as watchcache-exporter, is the Prometheus exporter.
`

// Command is the whole command line: prog is the name it was run as. The
// experiment subcommand runs the experiment; anything else, the daemon, or,
// run as the kubectl plugin (which has subcommands only), its usage.
func Command(ctx context.Context, prog string, args []string, stdout, stderr io.Writer, tty bool) int {
	if len(args) > 0 && args[0] == "experiment" {
		return RunExperiment(ctx, args[1:], stdout, stderr, tty)
	}
	if !strings.HasPrefix(filepath.Base(prog), PluginName) {
		return Run(ctx, args, stdout, stderr)
	}
	switch {
	case len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help":
		fmt.Fprint(stdout, pluginUsage)
		return 0
	case args[0] == "version" || args[0] == "--version":
		return Run(ctx, []string{"--version"}, stdout, stderr)
	}
	fmt.Fprintf(stderr, "error: unknown command %q for \"kubectl watchcache\"\n\n%s", args[0], pluginUsage)
	return 1
}
