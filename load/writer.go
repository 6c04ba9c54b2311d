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
	// Schedule of write rates; rate 0 is passive: no writes at all.
	Schedule Schedule
	// MaxRate is the hard cap that no step may pass.
	MaxRate float64
}

// Validate reports a bad Config, naming the flag that sets the bad field.
func (c Config) Validate() error {
	var errs []error
	if c.MaxRate <= 0 || math.IsNaN(c.MaxRate) || math.IsInf(c.MaxRate, 0) {
		errs = append(errs, fmt.Errorf("--load.max-rate=%v: must be a positive number of writes/s", c.MaxRate))
	}
	if err := c.Schedule.Validate(c.MaxRate); err != nil {
		flag := "--load.schedule"
		if c.Schedule.constant() {
			flag = "--load.rate"
		}
		errs = append(errs, fmt.Errorf("%s: %w", flag, err))
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

// Observer learns of each write: its RV and when it was written (the
// collector's History).
type Observer interface {
	ObserveWrite(rv uint64, at time.Time)
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

// Run writes until ctx ends, following the schedule. A schedule that never
// writes returns at once.
func (w *Writer) Run(ctx context.Context) {
	sched := w.cfg.Schedule
	peak := sched.Max()
	if peak == 0 {
		w.target.Set(0)
		w.log.Info("passive mode: no load")
		return
	}
	if !w.ensureObjects(ctx) {
		return
	}
	limiter := rate.NewLimiter(0, 1)
	gate := newGate()
	workers := Workers(peak)
	w.log.Info("load started", "schedule", sched.String(), "objects", len(w.names), "workers", workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { w.work(ctx, gate, limiter) })
	}
	w.follow(ctx, sched, gate, limiter)
	wg.Wait()
	w.log.Info("load stopped", "writes", w.seq.Load())
}

// follow sets the limiter to each step of the schedule in turn.
func (w *Writer) follow(ctx context.Context, sched Schedule, gate *gate, limiter *rate.Limiter) {
	start := w.now()
	for {
		st, i, remaining := sched.At(w.now().Sub(start))
		// A burst of a tenth of a second keeps the load smooth.
		limiter.SetLimit(rate.Limit(st.Rate))
		limiter.SetBurst(max(1, int(st.Rate/10)))
		gate.set(st.Rate > 0)
		w.target.Set(st.Rate)
		if len(sched) > 1 {
			w.log.Info("load step", "step", i+1, "of", len(sched), "writesPerSecond", st.Rate, "for", st.Duration)
		}
		if remaining == 0 {
			<-ctx.Done()
			return
		}
		if sleep(ctx, remaining) != nil {
			return
		}
	}
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

func (w *Writer) work(ctx context.Context, gate *gate, limiter *rate.Limiter) {
	for {
		if gate.wait(ctx) != nil {
			return
		}
		if err := limiter.Wait(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			continue // the rate fell to 0 meanwhile: back to the gate
		}
		n := w.seq.Add(1)
		name := w.names[n%uint64(len(w.names))]
		start := w.now()
		// A new value each time: a patch that changes nothing writes nothing.
		rv, err := owned.SetKey(ctx, w.client, w.cfg.Namespace, name, "seq", strconv.FormatUint(n, 10))
		end := w.now()
		w.duration.Observe(end.Sub(start).Seconds())
		if err == nil {
			w.writes.WithLabelValues("ok").Inc()
			w.clock.ObserveWrite(rv, end)
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
	if w.cfg.Schedule.Max() == 0 {
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

// gate holds the workers while the schedule asks for no writes: a limiter at
// rate 0 would fail their Wait instead of blocking it.
type gate struct {
	mu   sync.Mutex
	open chan struct{} // closed while writes are allowed
}

func newGate() *gate { return &gate{open: make(chan struct{})} }

func (g *gate) set(open bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		if !open {
			g.open = make(chan struct{})
		}
	default:
		if open {
			close(g.open)
		}
	}
}

func (g *gate) wait(ctx context.Context) error {
	g.mu.Lock()
	ch := g.open
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
