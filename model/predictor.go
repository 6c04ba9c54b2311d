package model

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/watchcache/watchcache-exporter/internal/promopts"
)

// Predictor is one apiserver's predicted window: it feeds the write rate the
// exporter measures into a simulated cache (Cache) and exports the window and
// capacity the simulation gives. The simulated cache starts empty when the
// measurement starts and again at each reset of the apiserver's own cache
// (its restart), so the prediction settles after a window or two.
type Predictor struct {
	window      time.Duration
	cache       *Cache
	start, last time.Time

	predicted prometheus.Gauge
	capacity  prometheus.Gauge
}

// NewPredictor predicts for a cache with the given history window, starting
// at now.
func NewPredictor(window time.Duration, now time.Time, reg prometheus.Registerer) *Predictor {
	f := promauto.With(reg)
	p := &Predictor{
		window: window,
		predicted: f.NewGauge(promopts.Gauge("predicted_window_seconds",
			"The history window that the apiserver's sizing rules give at the measured write rate, simulated since the measurement started or the apiserver's cache was last reset (so it shows the hysteresis after a rate drop too). NaN until the simulated cache has dropped an event.")),
		capacity: f.NewGauge(promopts.Gauge("predicted_capacity_events",
			"The watch cache capacity that the simulation gives at the measured write rate.")),
	}
	p.Reset(now)
	return p
}

// Reset starts the simulation again from an empty cache at now.
func (p *Predictor) Reset(now time.Time) {
	p.cache = NewCache(p.window)
	p.start, p.last = now, now
	p.predicted.Set(math.NaN())
	p.capacity.Set(float64(p.cache.Capacity()))
}

// Advance adds the events of rate writes/s since the last call, up to now.
func (p *Predictor) Advance(now time.Time, rate float64) {
	if !now.After(p.last) {
		return
	}
	from, to := p.last.Sub(p.start).Seconds(), now.Sub(p.start).Seconds()
	p.cache.AddRate(from, to, rate)
	p.last = now
	if w, ok := p.cache.Window(to); ok {
		p.predicted.Set(w)
	}
	p.capacity.Set(float64(p.cache.Capacity()))
}
