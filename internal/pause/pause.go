// Package pause waits for a while or until a context ends, the one sleep
// that every retry of the exporter takes.
package pause

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// MaxAsked caps the pause an answer may ask for with Retry-After: a proxy
// answering 503 with Retry-After: 3600 would otherwise freeze what waits on
// it for an hour.
const MaxAsked = time.Minute

// Asked is the pause err asks for with Retry-After (in the Status details
// that internal/finalanswer keeps): d, at most MaxAsked, and what it asked;
// 0 when it asks for none.
func Asked(err error) (d, asked time.Duration) {
	secs, ok := apierrors.SuggestsClientDelay(err)
	if !ok || secs <= 0 {
		return 0, 0
	}
	asked = time.Duration(secs) * time.Second
	return min(asked, MaxAsked), asked
}
