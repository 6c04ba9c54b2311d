// Package exporter is the watchcache-exporter daemon: flags, logging,
// clients, the measurement and load goroutines, and the HTTP server.
package exporter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/common/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/watchcache/watchcache-exporter/apiservers"
	"github.com/watchcache/watchcache-exporter/collector"
	"github.com/watchcache/watchcache-exporter/internal/owned"
	"github.com/watchcache/watchcache-exporter/internal/ratelog"
	"github.com/watchcache/watchcache-exporter/internal/status"
	"github.com/watchcache/watchcache-exporter/load"
)

const name = "watchcache-exporter"

// Run is the command without the process: it returns the exit status, 2 for
// bad flags and 1 for a failure to start or to serve.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
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
	// The measurement makes about four requests per probe interval and
	// apiserver; the load has a client of its own, sized to its cap.
	measureCfg := rest.CopyConfig(restCfg)
	measureCfg.QPS, measureCfg.Burst = 20, 40
	loadCfg := rest.CopyConfig(restCfg)
	loadCfg.QPS, loadCfg.Burst = load.ClientQPS(cfg.loadMaxRate)
	cs, err := kubernetes.NewForConfig(measureCfg)
	if err != nil {
		return err
	}
	loadCS, err := kubernetes.NewForConfig(loadCfg)
	if err != nil {
		return err
	}

	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sv, err := cs.Discovery().ServerVersion()
	if err != nil {
		return fmt.Errorf("apiserver %s unreachable: %w", restCfg.Host, err)
	}
	log.Info("connected", "apiserver", restCfg.Host, "serverVersion", sv.GitVersion)
	if err := checkAccess(startCtx, cs, neededAccess(cfg)); err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		versioncollector.NewCollector("watchcache_exporter"),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	// Enough own writes for the largest cache (204800 events with a 135 s
	// window); 2 MiB.
	hist := collector.NewHistory(1 << 18)
	writer, err := load.NewWriter(cfg.loadConfig(), loadCS, hist, reg, log.WithName("load"), time.Now)
	if err != nil {
		return err
	}
	passive := cfg.schedule.Max() == 0
	predictor := collector.NewPredictor(hist, cfg.historyWindow, passive, cfg.probeInterval, reg, log.WithName("model"), time.Now)
	fleet := apiservers.NewFleet(func(ep apiservers.Endpoint) (apiservers.Measurement, error) {
		epCfg := rest.CopyConfig(measureCfg)
		epCfg.Host = ep.URL
		if cfg.apiservers == "discover" && epCfg.ServerName == "" {
			// Endpoints are IPs; the serving certificate names the Service.
			epCfg.ServerName = "kubernetes.default.svc"
		}
		epCS, err := kubernetes.NewForConfig(epCfg)
		if err != nil {
			return nil, err
		}
		return collector.New(collector.Config{
			Namespace:     cfg.namespace,
			QuietName:     cfg.quietName,
			ProbeInterval: cfg.probeInterval,
		}, epCS, hist, prometheus.WrapRegistererWith(prometheus.Labels{"apiserver": ep.ID}, reg),
			log.WithName("collector").WithValues("apiserver", ep.ID), time.Now)
	}, log.WithName("apiservers"))
	page := status.New(reg, 5*time.Second, 720) // an hour
	mux := newMux(cfg, reg, fleet.Ready, page.Handler(cfg.telemetryPath))

	// Shutdown order: the load stops first, then the measurements and their
	// watches, then the owned objects are deleted, and the HTTP server
	// stops last.
	loadCtx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	measureCtx, stopMeasure := context.WithCancel(context.Background())
	defer stopMeasure()
	httpCtx, stopHTTP := context.WithCancel(context.Background())
	defer stopHTTP()
	var loadWG, measureWG sync.WaitGroup
	httpDone := make(chan error, 1)
	loadWG.Go(func() { writer.Run(loadCtx) })
	measureWG.Go(func() { predictor.Run(measureCtx) })
	measureWG.Go(func() { page.Run(measureCtx) })
	if cfg.schedule.Passive() {
		errLog := ratelog.New(log.WithName("poll"), 30*time.Second, time.Now)
		measureWG.Go(func() {
			collector.PollResourceVersion(measureCtx, cs, cfg.namespace, cfg.quietName, cfg.probeInterval, hist, errLog, time.Now)
		})
	}
	switch cfg.apiservers {
	case "discover":
		measureWG.Go(func() { apiservers.Discover(measureCtx, cs, fleet, log.WithName("apiservers")) })
	case "":
		u, err := url.Parse(restCfg.Host)
		if err != nil {
			return fmt.Errorf("kubeconfig server %q: %w", restCfg.Host, err)
		}
		fleet.Sync(measureCtx, []apiservers.Endpoint{{ID: apiservers.FromHost(u.Host).ID, URL: restCfg.Host}})
	default:
		eps, _ := apiservers.ParseList(cfg.apiservers) // validated with the flags
		fleet.Sync(measureCtx, eps)
	}
	go func() { httpDone <- listenAndServe(httpCtx, cfg, mux, slogger) }()

	var httpErr error
	httpEnded := false
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case httpErr = <-httpDone:
		httpEnded = true
	}
	stopLoad()
	loadWG.Wait()
	stopMeasure()
	measureWG.Wait()
	fleet.Stop()
	cleanupCtx, cancelCleanup := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelCleanup()
	if err := errors.Join(writer.Cleanup(cleanupCtx), owned.Delete(cleanupCtx, cs, cfg.namespace, cfg.quietName)); err != nil {
		log.Error(err, "deleting the exporter's ConfigMaps; delete them by hand with: kubectl delete configmaps -l "+owned.ManagedBySelector, "namespace", cfg.namespace)
	} else {
		log.Info("deleted the exporter's ConfigMaps", "namespace", cfg.namespace)
	}
	stopHTTP()
	if !httpEnded {
		httpErr = <-httpDone
	}
	return httpErr
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
