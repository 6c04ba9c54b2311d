// Command watchcache-exporter measures how long the kube-apiserver's watch
// cache keeps its history, and exports it to Prometheus.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/common/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const name = "watchcache-exporter"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without the process: it returns the exit status, 2 for bad
// flags and 1 for a failure to start.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, errHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	if cfg.version {
		fmt.Fprintln(stdout, version.Print(name))
		return 0
	}
	slogger, log := newLogger(stderr, cfg.logLevel, cfg.logFormat)
	log.Info("starting", "version", version.Info(), "build", version.BuildContext())
	if err := serve(ctx, cfg, slogger, log); err != nil {
		log.Error(err, "exiting")
		return 1
	}
	log.Info("stopped")
	return 0
}

func serve(ctx context.Context, cfg config, slogger *slog.Logger, log logr.Logger) error {
	restCfg, err := restConfig(cfg.kubeconfig)
	if err != nil {
		return err
	}
	restCfg.UserAgent = name + "/" + version.Version
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	sv, err := cs.Discovery().ServerVersion()
	if err != nil {
		return fmt.Errorf("apiserver %s unreachable: %w", restCfg.Host, err)
	}
	log.Info("connected", "apiserver", restCfg.Host, "serverVersion", sv.GitVersion)

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		versioncollector.NewCollector("watchcache_exporter"),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	mux, err := newMux(cfg, reg, func() error { return nil })
	if err != nil {
		return err
	}
	return listenAndServe(ctx, cfg, mux, slogger)
}

// restConfig loads --kubeconfig, or else the in-cluster config, or else the
// usual kubeconfig rules.
func restConfig(path string) (*rest.Config, error) {
	if path == "" {
		if c, err := rest.InClusterConfig(); err == nil {
			return c, nil
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	return c, nil
}
