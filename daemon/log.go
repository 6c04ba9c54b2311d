package daemon

import (
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

func parseLevel(s string) (slog.Level, error) {
	switch s {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("--log.level=%q: want debug, info, warn or error", s)
}

// newLogger returns the slog logger the web server takes, and the logr view
// of it that everything else takes. klog, which client-go logs to, is routed
// into the same handler.
func newLogger(w io.Writer, level, format string) (*slog.Logger, logr.Logger) {
	lvl, _ := parseLevel(level) // validated with the flags
	opts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler = slog.NewJSONHandler(w, opts)
	if format == "text" {
		h = slog.NewTextHandler(w, opts)
	}
	RouteKlog(h)
	return slog.New(h), logr.FromSlogHandler(h)
}

// RouteKlog sends klog's lines, client-go's, to h; only its first call
// counts. klog's logger is global and read without a lock, so it is set
// once per process before any client runs: Run does it first thing, and a
// test binary that runs exporters in its own process beside other tests
// calls it before they start (exportertest.Main).
func RouteKlog(h slog.Handler) {
	routeKlog.Do(func() { klog.SetSlogLogger(slog.New(h)) })
}

var routeKlog sync.Once
