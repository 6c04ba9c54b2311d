package resources

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/metadata"

	"github.com/watchcache/watchcache-exporter/internal/owned"
	"github.com/watchcache/watchcache-exporter/internal/pause"
	"github.com/watchcache/watchcache-exporter/internal/promopts"
	"github.com/watchcache/watchcache-exporter/internal/ratelog"
	"github.com/watchcache/watchcache-exporter/rvclock"
)

// Objects counts, every interval, the objects of each resource: what a
// client that relists it fetches. One list with limit=1 per resource and
// interval, metadata only, whose remainingItemCount gives the rest; its RV
// is the current revision of the etcd that holds the resource, which
// teaches that etcd's RV clock.
//
// Which etcd that is, the RVs say: the round of lists lies between two
// reads of the main etcd's current RV, and a list of a resource in the
// main etcd is a consistent read, so its RV lies between them too. A
// resource whose RV does not is in an etcd of its own (events, with
// --etcd-servers-overrides) and is timed by a clock of its own from then on.
// That clock would learn only once a round, minutes apart with hundreds of
// resources, while a window is a minute or two: blind most of the time.
// So such a resource is also listed (limit=1) every ClockEvery for its RV
// alone, within a quarter of the budget.
type Objects struct {
	client  metadata.Interface
	set     *Set
	hist    *rvclock.History
	current func(context.Context) (uint64, error)
	log     logr.Logger
	objects *prometheus.GaugeVec
	errors  *prometheus.CounterVec
	errLog  *ratelog.Logger
	every   time.Duration // ClockEvery; shorter in tests

	mu      sync.Mutex
	counted []Resource       // the last round's; written by Run alone
	counts  map[Name]float64 // the last count of each of them
}

// NewObjects counts the resources of set through client; current reads the
// main etcd's current RV (rvclock.CurrentRV). Its series carry no apiserver
// label: every apiserver lists from the same etcd.
func NewObjects(client metadata.Interface, set *Set, hist *rvclock.History, current func(context.Context) (uint64, error), reg prometheus.Registerer, log logr.Logger) *Objects {
	f := promauto.With(reg)
	o := &Objects{
		client: client, set: set, hist: hist, current: current, log: log,
		objects: f.NewGaugeVec(promopts.Gauge("resource_objects",
			"Objects of the resource in the whole cluster: what an informer of it fetches when it relists (a list with limit=1: its items plus remainingItemCount). NaN when the apiserver does not give the count."),
			[]string{"group", "resource"}),
		errors: f.NewCounterVec(promopts.Counter("resource_objects_errors_total",
			"Failed object counts (list limit=1), by resource and Kubernetes status reason."), []string{"group", "resource", "reason"}),
		errLog: ratelog.New(log, 30*time.Second, time.Now),
		counts: map[Name]float64{},
		every:  ClockEvery,
	}
	return o
}

// ClockEvery is how often the clock of each resource in an etcd of its own
// learns an RV, at the least: well within the shortest window (75 s).
const ClockEvery = 5 * time.Second

// Run counts at pace until ctx ends. The counts exist only while it runs: a
// standby's would be stale, and doubled in sums over the pods.
func (o *Objects) Run(ctx context.Context, pace Pace) {
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		o.objects.Reset()
		o.mu.Lock()
		o.counted = nil
		clear(o.counts)
		o.mu.Unlock()
	}()
	wg.Go(func() { o.tickClocks(ctx, pace.Budget) })
	pace.Run(ctx, o.set, o.round, nil)
}

// tickClocks lists each resource in an etcd of its own every o.every, or
// less often when there are so many that their lists would take more than
// a quarter of budget (0: no budget), until ctx ends. The lists share the
// counts' client, and so its rate limit (half the budget): the counts'
// rounds may take that much longer.
func (o *Objects) tickClocks(ctx context.Context, budget float64) {
	for {
		var others []Resource
		for _, r := range o.set.Current() {
			if o.hist.Other(r.Name()) {
				others = append(others, r)
			}
		}
		if pause.For(ctx, clockInterval(o.every, len(others), budget)) != nil {
			return
		}
		for _, r := range others {
			if s, _ := o.list(ctx, r); s.rv != 0 {
				o.hist.Place(r.Name(), s.rv, s.at, false)
			}
		}
	}
}

// listed is the RV of one resource's list and when it arrived; rv is 0
// when the list failed or its RV is not a number.
type listed struct {
	rv uint64
	at time.Time
}

// round counts every resource once, between two reads of the main etcd's
// current RV, and gives each RV to the clock of its etcd.
func (o *Objects) round(ctx context.Context, rs []Resource) {
	o.follow(rs)
	before, errBefore := o.current(ctx)
	seen := make([]listed, len(rs))
	for i, r := range rs {
		if ctx.Err() != nil {
			return
		}
		seen[i] = o.count(ctx, r)
	}
	after, errAfter := o.current(ctx)
	if err := errors.Join(errBefore, errAfter); err != nil && ctx.Err() == nil {
		o.errLog.Error("objects-current", err, "cannot read the main etcd's current resourceVersion (list configmaps, limit 1): the object counts' RVs teach no clock this round")
	}
	bracketed := errBefore == nil && errAfter == nil
	for i, r := range rs {
		s := seen[i]
		other := o.hist.Other(r.Name())
		if s.rv == 0 || !bracketed && !other {
			continue // which etcd it came from is unknown: it teaches no clock
		}
		sameEtcd := bracketed && before <= s.rv && s.rv <= after
		if !sameEtcd && !other {
			o.log.Info("a resource's resourceVersions are another etcd's than the ConfigMaps' (--etcd-servers-overrides): its window is timed by its own RVs",
				"resource", r.Name(), "resourceVersion", s.rv, "configMapsBefore", before, "configMapsAfter", after)
		}
		o.hist.Place(r.Name(), s.rv, s.at, sameEtcd)
	}
}

// clockInterval is every, or longer where n lists every interval would
// take more than a quarter of budget requests/s (0: no budget).
func clockInterval(every time.Duration, n int, budget float64) time.Duration {
	if budget <= 0 {
		return every
	}
	return max(every, time.Duration(float64(n)/(budget/4)*float64(time.Second)))
}

// list lists r with limit=1; l is nil when that failed, which it counts.
func (o *Objects) list(ctx context.Context, r Resource) (seen listed, l *metav1.PartialObjectMetadataList) {
	l, err := o.client.Resource(r.GVR()).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		if ctx.Err() == nil {
			o.errors.WithLabelValues(r.Group, r.Resource, promopts.Reason(err)).Inc()
			o.errLog.Error("objects-"+r.Name(), err, "cannot count the objects of a resource (list, limit=1)", "resource", r.Name())
			// A 429 asks for a pause (its client does not retry it).
			if d, _ := pause.Asked(err); d > 0 {
				_ = pause.For(ctx, d)
			}
		}
		return listed{}, nil
	}
	if rv, err := owned.ParseRV(l.ResourceVersion); err == nil {
		seen = listed{rv, time.Now()}
	}
	return seen, l
}

func (o *Objects) count(ctx context.Context, r Resource) listed {
	seen, l := o.list(ctx, r)
	if l == nil {
		return seen
	}
	n := math.NaN()
	switch {
	case l.RemainingItemCount != nil:
		n = float64(len(l.Items)) + float64(*l.RemainingItemCount)
	case l.Continue == "":
		n = float64(len(l.Items))
	}
	o.objects.WithLabelValues(r.Group, r.Resource).Set(n)
	o.mu.Lock()
	o.counts[r.Key()] = n
	o.mu.Unlock()
	return seen
}

// Largest is the counted resource with the most objects; ok is false
// until a count is known.
func (o *Objects) Largest() (r Resource, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	most := 0.0
	for _, c := range o.counted {
		if n, known := o.counts[c.Key()]; known && !math.IsNaN(n) && (!ok || n > most) {
			r, most, ok = c, n, true
		}
	}
	return r, ok
}

// follow starts the series of resources new in rs (NaN until counted) and
// deletes those of resources gone from it.
func (o *Objects) follow(rs []Resource) {
	added, removed := Diff(o.counted, rs)
	o.mu.Lock()
	o.counted = rs
	for _, r := range removed {
		delete(o.counts, r.Key())
	}
	o.mu.Unlock()
	if len(added)+len(removed) == 0 {
		return
	}
	for _, r := range added {
		o.objects.WithLabelValues(r.Group, r.Resource).Set(math.NaN())
	}
	for _, r := range removed {
		g, r := r.Group, r.Resource
		o.objects.DeleteLabelValues(g, r)
		o.errors.DeletePartialMatch(prometheus.Labels{"group": g, "resource": r})
	}
}
