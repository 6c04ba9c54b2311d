package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"
)

// newMux serves metrics, /healthz (the process is up), /readyz (ready()
// returns nil) and the status page at /.
func newMux(cfg config, reg *prometheus.Registry, ready func() error, page http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle(cfg.telemetryPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry:          reg,
		EnableOpenMetrics: true,
	}))
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
	mux.Handle("/", page)
	return mux
}

// listenAndServe serves mux with exporter-toolkit (TLS and basic auth from
// --web.config.file) until ctx ends, then shuts down within 10 s.
func listenAndServe(ctx context.Context, cfg config, mux http.Handler, logger *slog.Logger) error {
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	systemd := false
	flags := &web.FlagConfig{
		WebListenAddresses: &[]string{cfg.listenAddress},
		WebSystemdSocket:   &systemd,
		WebConfigFile:      &cfg.webConfigFile,
	}
	errc := make(chan error, 1)
	go func() { errc <- web.ListenAndServe(srv, flags, logger) }()
	select {
	case err := <-errc:
		return fmt.Errorf("--web.listen-address=%s: %w", cfg.listenAddress, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
