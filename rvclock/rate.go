package rvclock

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/watchcache/watchcache-exporter/internal/promopts"
)

// Rates measures the write rate every interval: the exporter's own ConfigMap
// writes, and the advance of resourceVersions (every write in the cluster).
type Rates struct {
	hist     *History
	cluster  bool
	interval time.Duration
	gauge    *prometheus.GaugeVec

	mu   sync.Mutex
	rate float64

	// Owned by tick.
	last       time.Time
	lastWrites uint64
	lastRV     uint64
	lastHeard  time.Time
	clusterNow float64
}

// silentIntervals is how long the cluster rate stays exported without a new
// reading of the current RV (polls failing, a standby): after that it is
// unknown and its series goes.
const silentIntervals = 3

// NewRates measures from hist. cluster says which rate Rate returns: the
// cluster's (passive mode, where the exporter writes nothing) or the
// exporter's own.
func NewRates(hist *History, cluster bool, interval time.Duration, reg prometheus.Registerer) *Rates {
	return &Rates{hist: hist, cluster: cluster, interval: interval,
		gauge: promauto.With(reg).NewGaugeVec(promopts.Gauge("measured_writes_per_second",
			"Write rate over the last probe interval: source=exporter counts the exporter's own ConfigMap writes, source=cluster the advance of resourceVersions (every write in the cluster) since the previous reading of the current RV."), []string{"source"})}
}

// Rate is the latest rate of the chosen source, writes/s. Without a new
// reading of the RV the cluster rate keeps its last value: the model assumes
// the writes went on, and the reading after a gap gives the gap's average.
func (r *Rates) Rate() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rate
}

// Run measures until ctx ends.
func (r *Rates) Run(ctx context.Context) {
	wait.UntilWithContext(ctx, func(context.Context) { r.tick(time.Now()) }, r.interval)
}

// tick measures the interval ending at now; the first call only starts it.
func (r *Rates) tick(now time.Time) {
	writes := r.hist.OwnWrites()
	rv, heard, known := r.hist.Clock.Newest()
	if r.last.IsZero() {
		r.last, r.lastWrites = now, writes
		if known {
			r.lastRV, r.lastHeard = rv, heard
		}
		return
	}
	own := float64(writes-r.lastWrites) / now.Sub(r.last).Seconds()
	r.gauge.WithLabelValues("exporter").Set(own)
	r.last, r.lastWrites = now, writes
	switch {
	case !known:
	case r.lastHeard.IsZero():
		r.lastRV, r.lastHeard = rv, heard
	case heard.After(r.lastHeard):
		// Divided by the time between the two readings, not by one
		// interval: after an outage the RVs' jump is spread over it.
		r.clusterNow = float64(rv-r.lastRV) / heard.Sub(r.lastHeard).Seconds()
		r.gauge.WithLabelValues("cluster").Set(r.clusterNow)
		r.lastRV, r.lastHeard = rv, heard
	case now.Sub(r.lastHeard) > silentIntervals*r.interval:
		r.gauge.DeleteLabelValues("cluster")
	}
	rate := own
	if r.cluster {
		rate = r.clusterNow
	}
	r.mu.Lock()
	r.rate = rate
	r.mu.Unlock()
}
