package rvclock

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/watchcache/watchcache-exporter/internal/promopts"
)

// Rates measures the write rate every interval, for the model: the
// exporter's own ConfigMap writes, or the advance of resourceVersions (every
// write in the cluster). It exports both as counters, whose rate() over any
// span is exact where a gauge of the last interval's rate is aliased by the
// scrape interval.
type Rates struct {
	hist     *History
	cluster  bool
	interval time.Duration
	own      *prometheus.Desc
	rvs      *prometheus.Desc

	mu        sync.Mutex
	rate      float64
	clusterRV uint64 // the newest RV, while read within silentIntervals; else 0

	// Owned by tick.
	last       time.Time
	lastWrites uint64
	lastRV     uint64
	lastHeard  time.Time
	clusterNow float64
}

// silentIntervals is how long the cluster's counter stays exported without
// a new reading of the current RV (polls failing, a standby): after that it
// is unknown and its series goes, rather than stand still as if nothing
// were written.
const silentIntervals = 3

// NewRates measures from hist. cluster says which rate Rate returns: the
// cluster's (passive mode, where the exporter writes nothing) or the
// exporter's own.
func NewRates(hist *History, cluster bool, interval time.Duration, reg prometheus.Registerer) *Rates {
	r := &Rates{hist: hist, cluster: cluster, interval: interval,
		own: prometheus.NewDesc(promopts.Namespace+"_exporter_writes_total",
			"ConfigMap writes of this exporter (the load's patches and the quiet ConfigMap's touches): rate() of it is the write rate the model takes under load.", nil, nil),
		rvs: prometheus.NewDesc(promopts.Namespace+"_cluster_writes_total",
			"Writes in the cluster (in the ConfigMaps' etcd), counted as the advance of resourceVersions: the newest resourceVersion the exporter has read. rate() of it is the write rate the model takes in passive mode. Absent while no current resourceVersion was read for 3 probe intervals.", nil, nil)}
	reg.MustRegister(r)
	return r
}

func (r *Rates) Describe(ch chan<- *prometheus.Desc) {
	ch <- r.own
	ch <- r.rvs
}

func (r *Rates) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(r.own, prometheus.CounterValue, float64(r.hist.OwnWrites()))
	r.mu.Lock()
	rv := r.clusterRV
	r.mu.Unlock()
	if rv > 0 {
		ch <- prometheus.MustNewConstMetric(r.rvs, prometheus.CounterValue, float64(rv))
	}
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
	r.last, r.lastWrites = now, writes
	clusterRV := uint64(0)
	switch {
	case !known:
	case r.lastHeard.IsZero():
		r.lastRV, r.lastHeard = rv, heard
		clusterRV = rv
	case heard.After(r.lastHeard):
		// Divided by the time between the two readings, not by one
		// interval: after an outage the RVs' jump is spread over it.
		r.clusterNow = float64(rv-r.lastRV) / heard.Sub(r.lastHeard).Seconds()
		r.lastRV, r.lastHeard = rv, heard
		clusterRV = rv
	case now.Sub(r.lastHeard) <= silentIntervals*r.interval:
		clusterRV = r.lastRV
	}
	rate := own
	if r.cluster {
		rate = r.clusterNow
	}
	r.mu.Lock()
	r.rate, r.clusterRV = rate, clusterRV
	r.mu.Unlock()
}
