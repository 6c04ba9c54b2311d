package collector

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchcache/watchcache-exporter/internal/kube"
	"github.com/watchcache/watchcache-exporter/internal/owned"
)

// Outcome of a reconnect probe.
type Outcome int

const (
	// OK: the apiserver accepted a watch from the RV.
	OK Outcome = iota
	// Expired: it refused the RV with 410 Gone.
	Expired
	// Error: anything else (network, RBAC, 5xx); says nothing about the RV.
	Error
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Expired:
		return "expired"
	}
	return "error"
}

// Label values of the reconnects_total "from" label.
const (
	FromStale    = "stale"
	FromBookmark = "bookmark"
)

// ProbeResult is what one reconnect probe found.
type ProbeResult struct {
	Outcome Outcome
	Refusal Refusal // when Expired
	Message string  // when Expired: the apiserver's own words
	Err     error   // when Error
	// At is when the probe was sent, Answered when its answer arrived (for
	// OK: when the settle time ended).
	At, Answered time.Time
}

// Prober opens short watches on the quiet ConfigMap from a given RV to see
// whether the apiserver still serves it. A watch from an RV older than the
// cache is answered with 200 and at once an ERROR event carrying 410; a
// served RV is answered with 200 and then nothing (or quiet's events), so
// the prober waits settle for an ERROR before calling the RV served.
type Prober struct {
	watch  WatchFunc
	opts   metav1.ListOptions
	settle time.Duration
}

// WatchFunc opens a watch, as a typed or dynamic client's Watch does.
type WatchFunc func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)

// NewProber probes ns/name through client.
func NewProber(client kube.ConfigMapsGetter, ns, name string, settle time.Duration) *Prober {
	return NewWatchProber(client.ConfigMaps(ns).Watch, metav1.ListOptions{FieldSelector: owned.NameSelector(name)}, settle)
}

// NewWatchProber probes with watches that w opens with opts.
func NewWatchProber(w WatchFunc, opts metav1.ListOptions, settle time.Duration) *Prober {
	return &Prober{watch: w, opts: opts, settle: settle}
}

// Probe opens a watch from rv and closes it as soon as the answer is known.
func (p *Prober) Probe(ctx context.Context, rv string) ProbeResult {
	r := ProbeResult{At: time.Now()}
	ctx, cancel := context.WithTimeout(ctx, p.settle+10*time.Second)
	defer cancel()
	opts := p.opts
	opts.ResourceVersion = rv
	w, err := p.watch(ctx, opts)
	if err != nil {
		return r.of(err)
	}
	defer w.Stop()
	timer := time.NewTimer(p.settle)
	defer timer.Stop()
	select {
	case ev, open := <-w.ResultChan():
		switch {
		case !open && ctx.Err() != nil:
			return r.of(ctx.Err())
		case !open:
			return r.of(errors.New("watch closed without an event"))
		case ev.Type == watch.Error:
			return r.of(apierrors.FromObject(ev.Object))
		}
		r.Outcome, r.Answered = OK, time.Now()
		return r
	case <-timer.C:
		r.Outcome, r.Answered = OK, time.Now()
		return r
	case <-ctx.Done():
		return r.of(ctx.Err())
	}
}

// of completes r with the answer err.
func (r ProbeResult) of(err error) ProbeResult {
	r.Answered = time.Now()
	if isGone(err) {
		var st apierrors.APIStatus
		errors.As(err, &st)
		r.Message = st.Status().Message
		r.Outcome, r.Refusal = Expired, ParseRefusal(r.Message)
		return r
	}
	r.Outcome, r.Err = Error, fmt.Errorf("watch: %w", err)
	return r
}

// isGone says whether err is the 410 Gone that tells a client to relist: as
// client-go's reflector reads it, reason Expired or Gone, or the bare code.
func isGone(err error) bool {
	if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return true
	}
	var st apierrors.APIStatus
	return errors.As(err, &st) && st.Status().Code == http.StatusGone
}
