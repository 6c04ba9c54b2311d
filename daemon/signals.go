package daemon

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// SignalContext is the context a command of the exporter runs under: it
// ends at the first SIGINT, SIGTERM or SIGHUP (the terminal closed), and
// from then on those signals take their default action again, so that a
// second Ctrl-C ends the process at once, whatever its cleanup is doing.
func SignalContext() (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		<-ctx.Done()
		stop()
	}()
	return ctx, stop
}
