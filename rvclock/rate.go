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
}

// NewRates measures from hist. cluster says which rate Rate returns: the
// cluster's (passive mode, where the exporter writes nothing) or the
// exporter's own.
func NewRates(hist *History, cluster bool, interval time.Duration, reg prometheus.Registerer) *Rates {
	return &Rates{hist: hist, cluster: cluster, interval: interval,
		gauge: promauto.With(reg).NewGaugeVec(promopts.Gauge("measured_writes_per_second",
			"Write rate over the last probe interval: source=exporter counts the exporter's own ConfigMap writes, source=cluster the advance of resourceVersions (every write in the cluster)."), []string{"source"})}
}

// Rate is the latest rate of the chosen source, writes/s.
func (r *Rates) Rate() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rate
}

// Run measures until ctx ends.
func (r *Rates) Run(ctx context.Context) {
	last, lastWrites := time.Now(), r.hist.OwnWrites()
	lastRV, _, _ := r.hist.Clock.Newest()
	first := true
	wait.UntilWithContext(ctx, func(context.Context) {
		if first { // Until calls at once; a rate needs an interval
			first = false
			return
		}
		now := time.Now()
		dt := now.Sub(last).Seconds()
		writes := r.hist.OwnWrites()
		own := float64(writes-lastWrites) / dt
		r.gauge.WithLabelValues("exporter").Set(own)
		rate := own
		if rv, _, ok := r.hist.Clock.Newest(); ok {
			if lastRV != 0 {
				cluster := float64(rv-lastRV) / dt
				r.gauge.WithLabelValues("cluster").Set(cluster)
				if r.cluster {
					rate = cluster
				}
			}
			lastRV = rv
		}
		last, lastWrites = now, writes
		r.mu.Lock()
		r.rate = rate
		r.mu.Unlock()
	}, r.interval)
}
