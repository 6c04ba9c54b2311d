package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"
)

// newMux serves metrics, the probes and the status page at /.
func newMux(cfg config, reg *prometheus.Registry, ready func() error, page http.Handler) *http.ServeMux {
	mux := newProbeMux(ready)
	mux.Handle(cfg.telemetryPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry:            reg, // counts promhttp's own errors and in-flight scrapes
		EnableOpenMetrics:   true,
		MaxRequestsInFlight: cfg.maxRequests,
		Timeout:             scrapeTimeout,
	}))
	// The status page copies every sample it keeps for each request: the
	// same limit.
	mux.Handle("/", limitInFlight(page, cfg.maxRequests))
	return mux
}

// limitInFlight answers 503 at once to requests beyond n at a time (0: no
// limit), as promhttp's MaxRequestsInFlight does for the metrics.
func limitInFlight(h http.Handler, n int) http.Handler {
	if n <= 0 {
		return h
	}
	sem := make(chan struct{}, n)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case sem <- struct{}{}:
			defer func() { <-sem }()
			h.ServeHTTP(w, r)
		default:
			http.Error(w, fmt.Sprintf("Limit of concurrent requests reached (%d), try again later.", n), http.StatusServiceUnavailable)
		}
	})
}

// newProbeMux serves /healthz (the process is up) and /readyz (ready()
// returns nil).
func newProbeMux(ready func() error) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// scrapeTimeout bounds one gather: a scrape gets a 503 rather than hanging.
const scrapeTimeout = 30 * time.Second

// newServer has a deadline on every phase of a request, so that slow or idle
// clients cannot hold connections for long.
func newServer(h http.Handler, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      scrapeTimeout + 10*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// listenAndServe serves mux with exporter-toolkit (TLS and basic auth from
// --web.config.file), and probes alone on --web.probe-address in plain HTTP
// without auth (kubelet probes carry no credentials), until ctx ends; then
// it shuts both down by stopBy (the end of the shutdown budget).
func listenAndServe(ctx context.Context, cfg config, mux, probes http.Handler, logger *slog.Logger, stopBy func() time.Time) error {
	srv := newServer(mux, logger)
	systemd := false
	flags := &web.FlagConfig{
		WebListenAddresses: &[]string{cfg.listenAddress},
		WebSystemdSocket:   &systemd,
		WebConfigFile:      &cfg.webConfigFile,
	}
	errc := make(chan error, 2)
	servers := []*http.Server{srv}
	go func() {
		err := web.ListenAndServe(srv, flags, logger)
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			err = fmt.Errorf("--web.listen-address=%s: %w", cfg.listenAddress, err)
		}
		errc <- err
	}()
	if cfg.probeAddress != "" {
		l, err := net.Listen("tcp", cfg.probeAddress)
		if err != nil {
			_ = srv.Close()
			<-errc
			return fmt.Errorf("--web.probe-address=%s: %w", cfg.probeAddress, err)
		}
		logger.Info("serving probes", "address", l.Addr().String())
		psrv := newServer(probes, logger)
		servers = append(servers, psrv)
		go func() {
			err := psrv.Serve(l)
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				err = fmt.Errorf("--web.probe-address=%s: %w", cfg.probeAddress, err)
			}
			errc <- err
		}()
	}
	var first error
	select {
	case first = <-errc:
	case <-ctx.Done():
	}
	sctx, cancel := context.WithDeadline(context.Background(), stopBy())
	defer cancel()
	var errs []error
	for _, s := range servers {
		errs = append(errs, s.Shutdown(sctx))
	}
	remaining := len(servers)
	if first != nil {
		remaining--
		errs = append(errs, first)
	}
	for range remaining {
		errs = append(errs, <-errc)
	}
	for i, err := range errs {
		if errors.Is(err, http.ErrServerClosed) {
			errs[i] = nil
		}
	}
	return errors.Join(errs...)
}
