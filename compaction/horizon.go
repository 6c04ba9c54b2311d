// Package compaction measures the LIST horizon, process-wide: for each etcd
// (each RV domain), the oldest resourceVersion that a LIST at an exact
// resourceVersion, a paginated LIST's continue token, or a watch of a
// resource whose cache is off still gets, which is the revision etcd last
// compacted to, and how old that revision is, through that etcd's RV clock.
// Every apiserver reads the same etcd, so its series carry no apiserver
// label; the leader alone measures.
//
// The apiserver compacts etcd every --etcd-compaction-interval (5m by
// default) to the revision it saw one interval before, so the horizon is a
// sawtooth between one and two intervals; a cluster whose compaction has
// stopped keeps every revision, and etcd's database grows until its quota.
package compaction

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/metadata"

	"github.com/watchcache/watchcache-exporter/internal/owned"
	"github.com/watchcache/watchcache-exporter/internal/promopts"
	"github.com/watchcache/watchcache-exporter/internal/ratelog"
	"github.com/watchcache/watchcache-exporter/resources"
	"github.com/watchcache/watchcache-exporter/rvclock"
)

// Config is what a Horizon measures, and how often.
type Config struct {
	// Client lists, metadata only. Its requests are sequential: one in
	// flight at a time, the checks' and the timed LIST's pages taking turns.
	Client metadata.Interface
	// Namespace and QuietName are the exporter's: the main etcd is probed
	// with LISTs of the quiet ConfigMap, selected by name, which the
	// exporter may always list. A LIST of one name reads etcd, not the
	// watch cache, so it sees etcd's compaction as it happens; the cache
	// trims its snapshots to it within 15 s, until when a LIST of a
	// resource whose cache is on may still be served from them.
	Namespace, QuietName string
	History              *rvclock.History
	// Resources are measured besides the ConfigMaps; nil: none. A resource
	// is timed by the etcd its object counts placed it in (rvclock.History),
	// and another etcd is probed through a LIST of one of its resources.
	Resources *resources.Set
	// Objects counts the resources: the largest is the one whose full
	// paginated LIST is timed. nil: no LIST is timed.
	Objects *resources.Objects
	// Interval between two checks of each etcd's compaction.
	Interval time.Duration
	// ListInterval between two timed paginated LISTs; 0: none.
	ListInterval time.Duration
	// StaleAfter failed intervals the horizon goes to NaN; default 3.
	StaleAfter int
}

// PageSize is the limit of each page of the timed paginated LIST: what
// client-go's pager asks for.
const PageSize = 500

var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// Horizon measures the LIST horizon of the ConfigMaps and of every resource
// of Config.Resources.
type Horizon struct {
	cfg    Config
	log    logr.Logger
	errLog *ratelog.Logger
	probes prometheus.Counter
	errors *prometheus.CounterVec

	// one request in flight at a time (serial): the client is unthrottled,
	// so that a LIST is timed as the apiserver serves it, and this is its
	// budget.
	one sync.Mutex

	mu      sync.Mutex
	etcds   map[*rvclock.Clock]*etcd
	list    timedList
	running bool // between Run's start and end: a standby exports no rows
}

// etcd is what is known of one etcd's compaction.
type etcd struct {
	oldest   uint64    // the oldest RV a LIST at it gets; 0: not found yet
	answered time.Time // the last check that found oldest
	// Compactions seen happen (oldest moving up), and when the last two
	// were seen: within one Interval after they happened.
	compactions    uint64
	last, previous time.Time
}

// timedList is the last full paginated LIST.
type timedList struct {
	r       resources.Resource
	seconds float64
	pages   int
	done    bool // false: none finished yet
}

// New measures what cfg says; the series go to reg.
func New(cfg Config, reg prometheus.Registerer, log logr.Logger) *Horizon {
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = 3
	}
	f := promauto.With(reg)
	h := &Horizon{
		cfg: cfg, log: log,
		errLog: ratelog.New(log, 30*time.Second, time.Now),
		etcds:  map[*rvclock.Clock]*etcd{},
		probes: f.NewCounter(promopts.Counter("compaction_probes_total",
			"LISTs at an exact resourceVersion (limit=1, metadata only) sent to find etcd's compaction: one per etcd and --compaction.interval, and about log2(revisions since) more after each compaction.")),
		errors: f.NewCounterVec(promopts.Counter("compaction_probe_errors_total", helpErrors), []string{"reason"}),
	}
	reg.MustRegister(collector{h})
	return h
}

// Run checks every Interval, and times a paginated LIST every
// ListInterval, until ctx ends.
func (h *Horizon) Run(ctx context.Context) {
	h.mu.Lock()
	h.running = true
	h.mu.Unlock()
	var wg sync.WaitGroup
	if h.cfg.ListInterval > 0 && h.cfg.Objects != nil {
		wg.Go(func() { h.runLists(ctx) })
	}
	wait.NonSlidingUntilWithContext(ctx, h.round, h.cfg.Interval)
	wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.etcds) // a standby's would be stale
	h.list = timedList{}
	h.running = false
}

// lister lists one resource, in one namespace or all.
type lister func(context.Context, metav1.ListOptions) (*metav1.PartialObjectMetadataList, error)

// serial is l, called by one goroutine of h at a time.
func (h *Horizon) serial(l lister) lister {
	return func(ctx context.Context, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
		h.one.Lock()
		defer h.one.Unlock()
		return l(ctx, opts)
	}
}

// target is one etcd and how to reach it.
type target struct {
	clk      *rvclock.Clock
	list     lister
	selector string // the LISTs' field selector
	name     string // for logs
}

// targets are the etcds known now: the main one, through the ConfigMaps of
// the namespace, and each other one through a resource it holds.
func (h *Horizon) targets() []target {
	out := []target{{h.cfg.History.Clock, h.serial(h.cfg.Client.Resource(configMaps).Namespace(h.cfg.Namespace).List), owned.NameSelector(h.cfg.QuietName), "configmaps"}}
	seen := map[*rvclock.Clock]bool{h.cfg.History.Clock: true}
	for _, r := range h.resources() {
		clk, placed := h.cfg.History.ClockOf(r.Name())
		if placed && !seen[clk] {
			seen[clk] = true
			out = append(out, target{clk, h.serial(h.cfg.Client.Resource(r.GVR()).List), "", r.Name()})
		}
	}
	return out
}

func (h *Horizon) resources() []resources.Resource {
	if h.cfg.Resources == nil {
		return nil
	}
	return h.cfg.Resources.Current()
}

func (h *Horizon) round(ctx context.Context) {
	for _, t := range h.targets() {
		if ctx.Err() != nil {
			return
		}
		h.check(ctx, t)
	}
}

// check finds t's oldest served RV. Compaction only moves forward: while
// the last one found is served, it holds (the RV below it was refused);
// once refused, the new one lies between it and the newest RV known, found
// by bisection: about log2 of the revisions since, once per compaction.
func (h *Horizon) check(ctx context.Context, t target) {
	served := func(rv uint64) (ok, known bool) {
		h.probes.Inc()
		_, err := t.list(ctx, metav1.ListOptions{FieldSelector: t.selector, ResourceVersion: strconv.FormatUint(rv, 10),
			ResourceVersionMatch: metav1.ResourceVersionMatchExact, Limit: 1})
		switch {
		case err == nil:
			return true, true
		case apierrors.IsResourceExpired(err):
			return false, true
		}
		if ctx.Err() == nil {
			h.errors.WithLabelValues(promopts.Reason(err)).Inc()
			h.errLog.Error("probe-"+t.name, err, "LIST at an exact resourceVersion failed: etcd's compaction is not known this round", "resource", t.name, "resourceVersion", rv)
		}
		return false, false
	}
	h.mu.Lock()
	prev := h.etcdOf(t.clk).oldest
	h.mu.Unlock()

	// lo: an RV known refused.
	lo := prev
	ok, known := served(max(prev, 1))
	switch {
	case !known:
		return
	case ok:
		h.found(t, prev, max(prev, 1))
		return
	case prev == 0:
		lo = 1 // before the first check: RV 1 refused
	}
	hi, _, okClock := t.clk.Newest()
	if !okClock || hi <= lo {
		h.errLog.Info("newest-"+t.name, "etcd's compaction is newer than any resourceVersion the RV clock knows: not found this round", "resource", t.name, "refused", lo)
		return
	}
	if ok, known := served(hi); !known {
		return
	} else if !ok {
		h.errLog.Info("newest-"+t.name, "the newest resourceVersion known was refused: not found this round", "resource", t.name, "refused", hi)
		return
	}
	oldest, ok := rvclock.OldestServed(lo, hi, served)
	if !ok {
		return
	}
	h.found(t, prev, oldest)
}

// found records that oldest is t's oldest served RV now, where prev was
// the last found (0: none).
func (h *Horizon) found(t target, prev, oldest uint64) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.etcdOf(t.clk)
	e.oldest, e.answered = oldest, now
	if prev != 0 && oldest > prev {
		e.compactions++
		e.previous, e.last = e.last, now
		h.log.V(1).Info("etcd compacted", "resource", t.name, "compactedResourceVersion", oldest, "previous", prev)
	}
}

// etcdOf is clk's etcd; h.mu is held.
func (h *Horizon) etcdOf(clk *rvclock.Clock) *etcd {
	e, ok := h.etcds[clk]
	if !ok {
		e = &etcd{}
		h.etcds[clk] = e
	}
	return e
}
