// Package load drives the noise: merge patches of a data key of N owned
// ConfigMaps at a target rate, bounded by a hard cap.
package load

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"

	"github.com/watchcache/watchcache-exporter/internal/owned"
	"github.com/watchcache/watchcache-exporter/internal/ratelog"
)

// Config of a Writer.
type Config struct {
	Namespace string
	// Prefix of the noise ConfigMaps' names: <prefix>0 .. <prefix>N-1.
	Prefix  string
	Objects int
	// Rate in writes/s; 0 is passive mode: no writes at all.
	Rate float64
	// MaxRate is the hard cap that Rate must not pass.
	MaxRate float64
}

// Validate reports a bad Config, naming the flag that sets the bad field.
func (c Config) Validate() error {
	var errs []error
	if c.MaxRate <= 0 || math.IsNaN(c.MaxRate) || math.IsInf(c.MaxRate, 0) {
		errs = append(errs, fmt.Errorf("--load.max-rate=%v: must be a positive number of writes/s", c.MaxRate))
	}
	switch {
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		errs = append(errs, fmt.Errorf("--load.rate=%v: must be a number of writes/s, 0 or more (0: no load)", c.Rate))
	case c.Rate > c.MaxRate:
		errs = append(errs, fmt.Errorf("--load.rate=%v is above --load.max-rate=%v", c.Rate, c.MaxRate))
	}
	if c.Objects < 1 || c.Objects > 1000 {
		errs = append(errs, fmt.Errorf("--load.objects=%d: must be between 1 and 1000", c.Objects))
	}
	return errors.Join(errs...)
}

// Names are the noise ConfigMaps' names.
func (c Config) Names() []string {
	names := make([]string, c.Objects)
	for i := range names {
		names[i] = c.Prefix + strconv.Itoa(i)
	}
	return names
}

// Workers is the size of the worker pool for the rate: enough concurrent
// patches to keep up at up to ~100 ms of patch latency, one at least, 64 at
// most.
func Workers(ratePerSecond float64) int {
	return int(min(max(math.Ceil(ratePerSecond/10), 1), 64))
}

// Observer learns when each RV was written (the collector's RV clock).
type Observer interface {
	Observe(rv uint64, at time.Time)
}

// Writer writes the noise.
type Writer struct {
	cfg    Config
	names  []string
	client kubernetes.Interface
	clock  Observer
	log    logr.Logger
	errLog *ratelog.Logger
	now    func() time.Time

	target   prometheus.Gauge
	writes   *prometheus.CounterVec
	duration prometheus.Histogram

	seq atomic.Uint64
}

// NewWriter validates cfg and registers the load metrics on reg. client
// must allow cfg.MaxRate requests/s (see ClientQPS).
func NewWriter(cfg Config, client kubernetes.Interface, clock Observer, reg prometheus.Registerer, log logr.Logger, now func() time.Time) (*Writer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f := promauto.With(reg)
	w := &Writer{
		cfg: cfg, names: cfg.Names(), client: client, clock: clock,
		log: log, errLog: ratelog.New(log, 30*time.Second, now), now: now,
		target: f.NewGauge(prometheus.GaugeOpts{Namespace: "watchcache", Name: "load_target_writes_per_second",
			Help: "The write rate the load schedule asks for now."}),
		writes: f.NewCounterVec(prometheus.CounterOpts{Namespace: "watchcache", Name: "load_writes_total",
			Help: "Noise patches by result: ok, throttled (429 from API Priority and Fairness), error."}, []string{"result"}),
		duration: f.NewHistogram(prometheus.HistogramOpts{Namespace: "watchcache", Name: "load_write_duration_seconds",
			Help:    "Latency of noise patches, whatever their result.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14), NativeHistogramBucketFactor: 1.1,
			NativeHistogramMaxBucketNumber: 160, NativeHistogramMinResetDuration: time.Hour}),
	}
	for _, r := range []string{"ok", "throttled", "error"} {
		w.writes.WithLabelValues(r)
	}
	return w, nil
}

// ClientQPS is the client-side rate limit the load client needs: the cap plus
// room for creating the objects. client-go's default (5 QPS, burst 10) would
// hold the load at 5 writes/s.
func ClientQPS(maxRate float64) (qps float32, burst int) {
	return float32(maxRate + 10), int(maxRate/10) + 20
}

// Run writes until ctx ends. In passive mode it returns at once.
func (w *Writer) Run(ctx context.Context) {
	w.target.Set(w.cfg.Rate)
	if w.cfg.Rate == 0 {
		w.log.Info("passive mode: no load")
		return
	}
	if !w.ensureObjects(ctx) {
		return
	}
	// A burst of a tenth of a second keeps the load smooth.
	limiter := rate.NewLimiter(rate.Limit(w.cfg.Rate), max(1, int(w.cfg.Rate/10)))
	workers := Workers(w.cfg.Rate)
	w.log.Info("load started", "writesPerSecond", w.cfg.Rate, "objects", len(w.names), "workers", workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { w.work(ctx, limiter) })
	}
	wg.Wait()
	w.log.Info("load stopped", "writes", w.seq.Load())
}

// ensureObjects creates the missing noise objects, retrying until ctx ends.
func (w *Writer) ensureObjects(ctx context.Context) bool {
	for i := 0; i < len(w.names); {
		if _, _, err := owned.Ensure(ctx, w.client, w.cfg.Namespace, w.names[i], owned.RoleNoise); err != nil {
			if ctx.Err() != nil {
				return false
			}
			w.errLog.Error("ensure", err, "cannot create noise ConfigMap; retrying in 5s", "namespace", w.cfg.Namespace, "name", w.names[i])
			if sleep(ctx, 5*time.Second) != nil {
				return false
			}
			continue
		}
		i++
	}
	return true
}

func (w *Writer) work(ctx context.Context, limiter *rate.Limiter) {
	for limiter.Wait(ctx) == nil {
		n := w.seq.Add(1)
		name := w.names[n%uint64(len(w.names))]
		start := w.now()
		// A new value each time: a patch that changes nothing writes nothing.
		rv, err := owned.SetKey(ctx, w.client, w.cfg.Namespace, name, "seq", strconv.FormatUint(n, 10))
		end := w.now()
		w.duration.Observe(end.Sub(start).Seconds())
		if err == nil {
			w.writes.WithLabelValues("ok").Inc()
			w.clock.Observe(rv, end)
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if pause := w.failed(ctx, name, err); sleep(ctx, pause) != nil {
			return
		}
	}
}

// failed counts and logs a failed patch and says how long this worker waits
// before its next one: what the apiserver asks for, or a second at least.
func (w *Writer) failed(ctx context.Context, name string, err error) time.Duration {
	pause := time.Second
	if secs, ok := apierrors.SuggestsClientDelay(err); ok && secs > 1 {
		pause = time.Duration(secs) * time.Second
	}
	if apierrors.IsTooManyRequests(err) {
		w.writes.WithLabelValues("throttled").Inc()
		w.errLog.Error("throttled", err, "noise patch throttled by the apiserver (429)", "pause", pause)
		return pause
	}
	w.writes.WithLabelValues("error").Inc()
	w.errLog.Error("error-"+string(apierrors.ReasonForError(err)), err, "noise patch failed", "name", name, "pause", pause)
	if apierrors.IsNotFound(err) { // somebody deleted it
		if _, _, err := owned.Ensure(ctx, w.client, w.cfg.Namespace, name, owned.RoleNoise); err != nil && ctx.Err() == nil {
			w.errLog.Error("recreate", err, "cannot recreate noise ConfigMap", "name", name)
		}
	}
	return pause
}

// Cleanup deletes the noise objects.
func (w *Writer) Cleanup(ctx context.Context) error {
	if w.cfg.Rate == 0 {
		return nil
	}
	return owned.Delete(ctx, w.client, w.cfg.Namespace, w.names...)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
