// Package families lists the metric families the exporter registers, read
// from a registry that holds its real metric sets (built on fake clients):
// for the tests that check every query names one, and for the metrics
// reference in docs/metrics.md.
package families

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/utils/clock"

	"github.com/watchcache/watchcache-exporter/apiservers"
	"github.com/watchcache/watchcache-exporter/collector"
	"github.com/watchcache/watchcache-exporter/compaction"
	"github.com/watchcache/watchcache-exporter/internal/leader"
	"github.com/watchcache/watchcache-exporter/internal/owned"
	"github.com/watchcache/watchcache-exporter/load"
	"github.com/watchcache/watchcache-exporter/resources"
	"github.com/watchcache/watchcache-exporter/rvclock"
	"github.com/watchcache/watchcache-exporter/test/typed"
)

// Family is one metric family the exporter can expose.
type Family struct {
	Name, Help, Type string
	// Labels are its label names, the per-apiserver label included.
	Labels []string
	// Values are the values each label has from the start (those the
	// exporter creates before anything happens), by label.
	Values map[string][]string
}

// All are the exporter's own families (not the Go and process collectors'),
// sorted by name.
func All() ([]Family, error) {
	reg := prometheus.NewRegistry()
	rec := &describing{Registerer: reg, byName: map[string]*Family{}}
	if err := register(rec); err != nil {
		return nil, err
	}
	gathered, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	for _, mf := range gathered {
		f := rec.byName[mf.GetName()]
		if f == nil {
			continue
		}
		f.Type = strings.ToLower(mf.GetType().String())
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if !slices.Contains(f.Values[lp.GetName()], lp.GetValue()) {
					f.Values[lp.GetName()] = append(f.Values[lp.GetName()], lp.GetValue())
				}
			}
		}
	}
	var out []Family
	for _, f := range rec.byName {
		if f.Type == "" {
			// No series yet: promtool's rule (and the exporter's names)
			// make a counter's name end in _total.
			f.Type = strings.ToLower(dto.MetricType_GAUGE.String())
			if strings.HasSuffix(f.Name, "_total") {
				f.Type = strings.ToLower(dto.MetricType_COUNTER.String())
			}
		}
		for _, v := range f.Values {
			slices.Sort(v)
		}
		out = append(out, *f)
	}
	slices.SortFunc(out, func(a, b Family) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// register registers every metric set of the exporter on reg, as the
// daemon does; the per-apiserver ones under apiserver="x".
func register(reg prometheus.Registerer) error {
	hist := rvclock.NewHistory(10)
	rates := rvclock.NewRates(hist, false, time.Second, reg)
	store := owned.NewStore("ns", "q", reg, logr.Discard(), time.Now)
	res := collector.ResourcesConfig{Resources: resources.Fixed([]resources.Resource{{Version: "v1", Resource: "pods"}}), Pace: resources.Pace{Interval: time.Second},
		Client: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())}
	objects := resources.NewObjects(nil, res.Resources, hist, nil, reg, logr.Discard())
	compaction.New(compaction.Config{Client: metadatafake.NewSimpleMetadataClient(runtime.NewScheme()), Namespace: "ns", QuietName: "q", History: hist,
		Resources: res.Resources, Objects: objects, Interval: time.Second}, reg, logr.Discard())
	if _, err := collector.New(collector.Config{Namespace: "ns", QuietName: "q", ProbeInterval: time.Second, Resources: res, Labels: prometheus.Labels{"apiserver": "x"}},
		typed.Core(fake.NewClientset().CoreV1()), store, hist, rates.Rate, reg, logr.Discard()); err != nil {
		return err
	}
	if _, err := load.NewWriter(load.Config{Prefix: "n-", Objects: 1, Schedule: load.Constant(1), MaxRate: 1}, nil, store, hist, reg, logr.Discard()); err != nil {
		return err
	}
	if _, err := leader.New(leader.Config{Namespace: "ns", Name: "q", Identity: "me"}, typed.Leases(fake.NewClientset().CoordinationV1()), reg, logr.Discard()); err != nil {
		return err
	}
	apiservers.NewFleet(nil, time.Minute, clock.RealClock{}, reg, logr.Discard())
	return reg.Register(versioncollector.NewCollector("watchcache_exporter"))
}

// describing records the Desc of every collector registered through it.
type describing struct {
	prometheus.Registerer
	byName map[string]*Family
}

var descFields = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), unit: "[^"]*", constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}\}$`)

func (d *describing) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	var errs []string
	for desc := range ch {
		m := descFields.FindStringSubmatch(desc.String())
		if m == nil {
			errs = append(errs, desc.String())
			continue
		}
		name, _ := strconv.Unquote(m[1])
		help, _ := strconv.Unquote(m[2])
		var labels []string
		for _, lp := range strings.Split(m[3], ",") {
			if n, _, ok := strings.Cut(lp, "="); ok {
				labels = append(labels, n)
			}
		}
		for _, l := range strings.Split(m[4], ",") {
			if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
				labels = append(labels, l)
			}
		}
		slices.Sort(labels)
		d.byName[name] = &Family{Name: name, Help: help, Labels: labels, Values: map[string][]string{}}
	}
	if len(errs) > 0 {
		return fmt.Errorf("descriptions not understood: %s", strings.Join(errs, "; "))
	}
	return d.Registerer.Register(c)
}

func (d *describing) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := d.Register(c); err != nil {
			panic(err)
		}
	}
}
