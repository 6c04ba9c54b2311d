// Package load drives the noise: JSON patches of a data key of N owned
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
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/watchcache/watchcache-exporter/internal/kube"
	"github.com/watchcache/watchcache-exporter/internal/owned"
	"github.com/watchcache/watchcache-exporter/internal/pause"
	"github.com/watchcache/watchcache-exporter/internal/promopts"
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

// FieldError says which field of a Config is wrong.
type FieldError struct {
	Field string // MaxRate, Schedule, Objects
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// Validate reports each bad field of c as a *FieldError.
func (c Config) Validate() error {
	var errs []error
	if c.MaxRate <= 0 || math.IsNaN(c.MaxRate) || math.IsInf(c.MaxRate, 0) {
		errs = append(errs, &FieldError{"MaxRate", errors.New("must be a positive number of writes/s")})
	} else if c.MaxRate > MaxRateLimit {
		errs = append(errs, &FieldError{"MaxRate", fmt.Errorf("must be at most %v writes/s", MaxRateLimit)})
	}
	if err := c.Schedule.Validate(c.MaxRate); err != nil {
		errs = append(errs, &FieldError{"Schedule", err})
	}
	if c.Objects < 1 || c.Objects > 1000 {
		errs = append(errs, &FieldError{"Objects", errors.New("must be between 1 and 1000")})
	}
	return errors.Join(errs...)
}

// MaxRateLimit bounds MaxRate: past it the client's burst (a tenth of the
// rate) would overflow, and no apiserver this exporter measures keeps up.
const MaxRateLimit = 100000

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
	client kube.Core
	store  *owned.Store
	clock  Observer
	log    logr.Logger
	errLog *ratelog.Logger

	target   *prometheus.GaugeVec // no labels: absent while no load runs
	writes   *prometheus.CounterVec
	duration prometheus.Histogram

	seq atomic.Uint64
}

// NewWriter validates cfg and registers the load metrics on reg. client
// must allow cfg.MaxRate requests/s (see ClientQPS); store says which noise
// objects are the exporter's to write.
func NewWriter(cfg Config, client kube.Core, store *owned.Store, clock Observer, reg prometheus.Registerer, log logr.Logger) (*Writer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f := promauto.With(reg)
	w := &Writer{
		cfg: cfg, names: cfg.Names(), client: client, store: store, clock: clock,
		log: log, errLog: ratelog.New(log, 30*time.Second, time.Now),
		target: f.NewGaugeVec(promopts.Gauge("load_target_writes_per_second",
			"The write rate the load schedule asks for now; absent while this process drives no load (a standby), 0 in passive mode."), nil),
		writes: f.NewCounterVec(promopts.Counter("load_writes_total",
			"Noise patches by result: ok, throttled (429 from API Priority and Fairness), error."), []string{"result"}),
		duration: f.NewHistogram(promopts.Histogram("load_write_duration_seconds",
			"Latency of noise patches, whatever their result.", prometheus.ExponentialBuckets(0.001, 2, 14))),
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
	return float32(maxRate + 10), int(min(maxRate, MaxRateLimit)/10) + 20
}

// Run writes until ctx ends, following the schedule. A schedule that never
// writes returns at once.
func (w *Writer) Run(ctx context.Context) {
	sched := w.cfg.Schedule
	peak := sched.Max()
	if peak == 0 {
		// No target rather than 0: passive mode asks for no load at all.
		w.log.Info("passive mode: no load")
		return
	}
	// A standby reports no target: summed over the pods, targets would
	// count the load twice.
	defer w.target.Reset()
	if !w.ensureObjects(ctx) {
		return
	}
	workers := Workers(peak)
	w.log.Info("load started", "schedule", sched.String(), "objects", len(w.names), "workers", workers)
	var wg sync.WaitGroup
	// Room for a tick's writes, so none is dropped while the workers keep up.
	tokens := make(chan struct{}, max(workers, int(math.Ceil(peak*pacerTick.Seconds()))))
	var target atomic.Uint64 // the step's rate, as float64 bits
	for range workers {
		wg.Go(func() { w.work(ctx, tokens) })
	}
	wg.Go(func() {
		pace(ctx, pacerTick, func() float64 { return math.Float64frombits(target.Load()) }, tokens)
	})
	w.follow(ctx, sched, func(r float64) { target.Store(math.Float64bits(r)) })
	wg.Wait()
	w.log.Info("load stopped", "writes", w.seq.Load())
}

// follow sets the limiter to each step of the schedule in turn.
func (w *Writer) follow(ctx context.Context, sched Schedule, setRate func(float64)) {
	start := time.Now()
	for {
		st, i, remaining := sched.At(time.Now().Sub(start))
		setRate(st.Rate)
		w.target.WithLabelValues().Set(st.Rate)
		if len(sched) > 1 {
			w.log.Info("load step", "step", i+1, "of", len(sched), "writesPerSecond", st.Rate, "for", st.Duration)
		}
		if remaining == 0 {
			<-ctx.Done()
			return
		}
		if pause.For(ctx, remaining) != nil {
			return
		}
	}
}

// ensureObjects creates the missing noise objects, retrying until ctx ends.
// Objects that are not the exporter's are left to the store's rechecks.
func (w *Writer) ensureObjects(ctx context.Context) bool {
	for i := 0; i < len(w.names); {
		if _, _, err := w.store.Ensure(ctx, w.client, w.names[i], owned.RoleNoise); err != nil && !errors.Is(err, owned.ErrNotOwned) {
			if ctx.Err() != nil {
				return false
			}
			w.errLog.Error("ensure", err, "cannot create noise ConfigMap; retrying in 5s", "namespace", w.cfg.Namespace, "name", w.names[i])
			if pause.For(ctx, 5*time.Second) != nil {
				return false
			}
			continue
		}
		i++
	}
	return true
}

func (w *Writer) work(ctx context.Context, tokens <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-tokens:
		}
		n := w.seq.Add(1)
		name, ok := w.pick(ctx, n)
		if !ok { // none is the exporter's now: the store says so
			if pause.For(ctx, time.Second) != nil {
				return
			}
			continue
		}
		start := time.Now()
		// A new value each time: a patch that changes nothing writes nothing.
		rv, err := w.store.SetSeq(ctx, w.client, name, strconv.FormatUint(n, 10))
		end := time.Now()
		w.duration.Observe(end.Sub(start).Seconds())
		if err == nil {
			w.writes.WithLabelValues("ok").Inc()
			w.clock.ObserveWrite(rv, end)
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if d := w.failed(ctx, name, err); pause.For(ctx, d) != nil {
			return
		}
	}
}

// pick is the noise object of write n, or the next one that may be written.
func (w *Writer) pick(ctx context.Context, n uint64) (string, bool) {
	for i := range uint64(len(w.names)) {
		name := w.names[(n+i)%uint64(len(w.names))]
		if w.store.Usable(ctx, w.client, name, owned.RoleNoise) {
			return name, true
		}
	}
	return "", false
}

// failed counts and logs a failed patch and says how long this worker waits
// before its next one: what the apiserver asks for, or a second at least.
func (w *Writer) failed(ctx context.Context, name string, err error) time.Duration {
	wait := time.Second
	if d, _ := pause.Asked(err); d > wait {
		wait = d
	}
	if apierrors.IsTooManyRequests(err) {
		w.writes.WithLabelValues("throttled").Inc()
		w.errLog.Error("throttled", err, "noise patch throttled by the apiserver (429)", "pause", wait)
		return wait
	}
	w.writes.WithLabelValues("error").Inc()
	if errors.Is(err, owned.ErrNotOwned) {
		return 0 // the store logged it; the next write goes to another object
	}
	w.errLog.Error("error-"+string(apierrors.ReasonForError(err)), err, "noise patch failed", "name", name, "pause", wait)
	if apierrors.IsNotFound(err) { // somebody deleted it
		if _, _, err := w.store.Ensure(ctx, w.client, name, owned.RoleNoise); err != nil && ctx.Err() == nil && !errors.Is(err, owned.ErrNotOwned) {
			w.errLog.Error("recreate", err, "cannot recreate noise ConfigMap", "name", name)
		}
	}
	return wait
}

// Objects are the names of the noise objects the writer makes (none in
// passive mode): what a shutdown deletes.
func (w *Writer) Objects() []string {
	if w.cfg.Schedule.Max() == 0 {
		return nil
	}
	return w.names
}

// pacerTick is how often the pacer hands out the writes due. A tenth of a
// second's writes at once wake the workers and the connection once a burst
// rather than once a write: at 100 writes/s the exporter's CPU went from 6.2%
// to 3.0% of a core, the rate unchanged over any second.
const pacerTick = 100 * time.Millisecond

// pace hands the workers one token per write due, every tick, until ctx ends.
func pace(ctx context.Context, tick time.Duration, rate func() float64, tokens chan<- struct{}) {
	t := time.NewTicker(tick)
	defer t.Stop()
	p := pacer{last: time.Now()}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			p.tick(now, rate(), tokens)
		}
	}
}

// pacer counts the writes due at a rate since its last tick.
type pacer struct {
	last time.Time
	due  float64 // writes due and not yet handed out, under 1 after a tick
}

// tick hands out the writes due by now. Those that find every worker busy and
// the tokens channel full are dropped, not owed: a slow apiserver gets a lower
// rate, never a catch-up burst.
func (p *pacer) tick(now time.Time, rate float64, tokens chan<- struct{}) {
	p.due += rate * now.Sub(p.last).Seconds()
	p.last = now
	for ; p.due >= 1; p.due-- {
		select {
		case tokens <- struct{}{}:
		default:
			p.due = math.Mod(p.due, 1)
			return
		}
	}
}
