package collector

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

var nan = math.NaN()

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
	Err     error   // when Error
	At      time.Time
}

// Prober opens short watches on the quiet ConfigMap from a given RV to see
// whether the apiserver still serves it. A watch from an RV older than the
// cache is answered with 200 and at once an ERROR event carrying 410; a
// served RV is answered with 200 and then nothing (or quiet's events), so
// the prober waits settle for an ERROR before calling the RV served.
type Prober struct {
	client kubernetes.Interface
	ns     string
	name   string
	settle time.Duration
	now    func() time.Time
}

// NewProber probes ns/name through client.
func NewProber(client kubernetes.Interface, ns, name string, settle time.Duration, now func() time.Time) *Prober {
	return &Prober{client: client, ns: ns, name: name, settle: settle, now: now}
}

// Probe opens a watch from rv and closes it as soon as the answer is known.
func (p *Prober) Probe(ctx context.Context, rv string) ProbeResult {
	at := p.now()
	ctx, cancel := context.WithTimeout(ctx, p.settle+10*time.Second)
	defer cancel()
	w, err := p.client.CoreV1().ConfigMaps(p.ns).Watch(ctx, metav1.ListOptions{
		ResourceVersion: rv,
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", p.name).String(),
	})
	if err != nil {
		return resultOf(err, at)
	}
	defer w.Stop()
	timer := time.NewTimer(p.settle)
	defer timer.Stop()
	select {
	case ev, open := <-w.ResultChan():
		switch {
		case !open:
			if ctx.Err() != nil {
				return ProbeResult{Outcome: Error, Err: ctx.Err(), At: at}
			}
			return ProbeResult{Outcome: Error, Err: errors.New("watch closed without an event"), At: at}
		case ev.Type == watch.Error:
			return resultOf(apierrors.FromObject(ev.Object), at)
		}
		return ProbeResult{Outcome: OK, At: at}
	case <-timer.C:
		return ProbeResult{Outcome: OK, At: at}
	case <-ctx.Done():
		return ProbeResult{Outcome: Error, Err: ctx.Err(), At: at}
	}
}

func resultOf(err error, at time.Time) ProbeResult {
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Code == http.StatusGone {
		return ProbeResult{Outcome: Expired, Refusal: ParseRefusal(st.Status().Message), At: at}
	}
	return ProbeResult{Outcome: Error, Err: fmt.Errorf("watch: %w", err), At: at}
}
