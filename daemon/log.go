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
	sl := slog.New(h)
	// klog's logger is global: set it once per process (tests run several
	// exporters in one), before client-go logs anything.
	routeKlog.Do(func() { klog.SetSlogLogger(sl) })
	return sl, logr.FromSlogHandler(h)
}

var routeKlog sync.Once
