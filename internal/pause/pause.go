// Package pause waits for a while or until a context ends, the one sleep
// that every retry of the exporter takes.
package pause

import (
	"context"
	"time"
)

// For waits d, or less if ctx ends first; it returns ctx.Err() then.
func For(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
