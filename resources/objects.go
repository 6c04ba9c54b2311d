package resources

import (
	"context"
	"math"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/metadata"

	"github.com/watchcache/watchcache-exporter/internal/owned"
	"github.com/watchcache/watchcache-exporter/internal/promopts"
	"github.com/watchcache/watchcache-exporter/internal/ratelog"
	"github.com/watchcache/watchcache-exporter/rvclock"
)

// Objects counts, every interval, the objects of each resource: what a
// client that relists it fetches. One list with limit=1 per resource and
// interval, metadata only, whose remainingItemCount gives the rest; its RV
// is the cluster's current one, which teaches the RV clock.
type Objects struct {
	client    metadata.Interface
	resources []Resource
	hist      *rvclock.History
	objects   *prometheus.GaugeVec
	errors    *prometheus.CounterVec
	errLog    *ratelog.Logger
}

// NewObjects counts resources through client. Its series carry no apiserver
// label: every apiserver lists from the same etcd.
func NewObjects(client metadata.Interface, resources []Resource, hist *rvclock.History, reg prometheus.Registerer, log logr.Logger) *Objects {
	f := promauto.With(reg)
	o := &Objects{
		client: client, resources: resources, hist: hist,
		objects: f.NewGaugeVec(promopts.Gauge("resource_objects",
			"Objects of the resource in the whole cluster: what an informer of it fetches when it relists (a list with limit=1: its items plus remainingItemCount). NaN when the apiserver does not give the count."),
			[]string{"group", "resource"}),
		errors: f.NewCounterVec(promopts.Counter("resource_objects_errors_total",
			"Failed object counts (list limit=1), by resource and Kubernetes status reason."), []string{"group", "resource", "reason"}),
		errLog: ratelog.New(log, 30*time.Second, time.Now),
	}
	for _, r := range resources {
		o.objects.WithLabelValues(r.Group, r.Resource).Set(math.NaN())
	}
	return o
}

// Run counts every interval until ctx ends.
func (o *Objects) Run(ctx context.Context, interval time.Duration) {
	wait.NonSlidingUntilWithContext(ctx, func(ctx context.Context) {
		for _, r := range o.resources {
			if ctx.Err() != nil {
				return
			}
			o.count(ctx, r)
		}
	}, interval)
}

func (o *Objects) count(ctx context.Context, r Resource) {
	l, err := o.client.Resource(r.GVR()).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		if ctx.Err() == nil {
			o.errors.WithLabelValues(r.Group, r.Resource, promopts.Reason(err)).Inc()
			o.errLog.Error("objects-"+r.Name(), err, "cannot count the objects of a resource (list, limit=1)", "resource", r.Name())
		}
		return
	}
	if rv, err := owned.ParseRV(l.ResourceVersion); err == nil {
		o.hist.Observe(rv, time.Now())
	}
	n := math.NaN()
	switch {
	case l.RemainingItemCount != nil:
		n = float64(len(l.Items)) + float64(*l.RemainingItemCount)
	case l.Continue == "":
		n = float64(len(l.Items))
	}
	o.objects.WithLabelValues(r.Group, r.Resource).Set(n)
}
