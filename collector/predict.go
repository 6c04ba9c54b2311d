package collector

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/watchcache/watchcache-exporter/model"
)

// Predictor feeds the write rate the exporter measures into a simulation of
// the watch cache's sizing (package model), and exports the window the
// simulation predicts. The simulated cache starts empty when the exporter
// starts, so the prediction settles after a window or two.
type Predictor struct {
	hist     *History
	passive  bool
	interval time.Duration
	now      func() time.Time
	log      logr.Logger

	cache     *model.Cache
	predicted prometheus.Gauge
	capacity  prometheus.Gauge
	rate      *prometheus.GaugeVec
}

// NewPredictor predicts the window of a cache with the given history window.
// In load mode (passive false) the measured rate is the exporter's own
// ConfigMap writes; in passive mode, the rate at which resourceVersions
// advance (every write in the cluster, an upper bound of ConfigMap writes).
func NewPredictor(hist *History, window time.Duration, passive bool, interval time.Duration, reg prometheus.Registerer, log logr.Logger, now func() time.Time) *Predictor {
	f := promauto.With(reg)
	p := &Predictor{
		hist: hist, passive: passive, interval: interval, now: now, log: log,
		cache: model.NewCache(window),
		predicted: f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "predicted_window_seconds",
			Help: "The history window that the apiserver's sizing rules give at the measured write rate, simulated since the exporter started (so it shows the hysteresis after a rate drop too). NaN until the simulated cache has dropped an event."}),
		capacity: f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "predicted_capacity_events",
			Help: "The watch cache capacity that the simulation gives at the measured write rate."}),
		rate: f.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "measured_writes_per_second",
			Help: "Write rate over the last probe interval: source=exporter counts the exporter's own ConfigMap writes, source=cluster the advance of resourceVersions (every write in the cluster)."}, []string{"source"}),
	}
	p.predicted.Set(nan)
	return p
}

// Run updates the prediction every interval until ctx ends.
func (p *Predictor) Run(ctx context.Context) {
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	start := p.now()
	last, lastWrites := start, p.hist.OwnWrites()
	lastRV, _, _ := p.hist.Clock.Newest()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := p.now()
		dt := now.Sub(last).Seconds()
		writes := p.hist.OwnWrites()
		own := float64(writes-lastWrites) / dt
		p.rate.WithLabelValues("exporter").Set(own)
		r := own
		if rv, _, ok := p.hist.Clock.Newest(); ok {
			if lastRV != 0 {
				cluster := float64(rv-lastRV) / dt
				p.rate.WithLabelValues("cluster").Set(cluster)
				if p.passive {
					r = cluster
				}
			}
			lastRV = rv
		}
		p.cache.AddRate(last.Sub(start).Seconds(), now.Sub(start).Seconds(), r)
		if w, ok := p.cache.Window(now.Sub(start).Seconds()); ok {
			p.predicted.Set(w)
		}
		p.capacity.Set(float64(p.cache.Capacity()))
		last, lastWrites = now, writes
	}
}
