// Package apiservers runs one measurement per kube-apiserver instance: each
// instance has a watch cache of its own, and a client that reconnects to
// another instance may be refused sooner.
package apiservers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/clock"

	"github.com/watchcache/watchcache-exporter/collector"
	"github.com/watchcache/watchcache-exporter/internal/promopts"
)

// Endpoint is one apiserver instance.
type Endpoint struct {
	// ID is host:port, the value of the "apiserver" label.
	ID string
	// URL is https://host:port.
	URL string
}

// ParseList reads --apiservers=https://a:6443,https://b:6443.
func ParseList(s string) ([]Endpoint, error) {
	var eps []Endpoint
	for _, raw := range strings.Split(s, ",") {
		u, err := url.Parse(raw)
		if err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return nil, fmt.Errorf("%q: want https://host:port", raw)
		}
		ep := FromHost(u.Host)
		if slices.ContainsFunc(eps, func(e Endpoint) bool { return e.ID == ep.ID }) {
			return nil, fmt.Errorf("%q is listed twice", raw)
		}
		eps = append(eps, ep)
	}
	return eps, nil
}

// FromHost makes the Endpoint of host[:port] (port 443 when missing).
func FromHost(host string) Endpoint {
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(strings.Trim(host, "[]"), "443")
	}
	return Endpoint{ID: host, URL: "https://" + host}
}

// FromSlices lists the ready endpoints of the EndpointSlices of the
// default/kubernetes Service, in a stable order.
func FromSlices(slices_ []*discoveryv1.EndpointSlice) []Endpoint {
	seen := map[string]bool{}
	var eps []Endpoint
	for _, s := range slices_ {
		port := int32(443)
		for _, p := range s.Ports {
			if p.Port != nil && (p.Name == nil || *p.Name == "https") {
				port = *p.Port
				break
			}
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, a := range e.Addresses {
				ep := FromHost(net.JoinHostPort(a, strconv.Itoa(int(port))))
				if !seen[ep.ID] {
					seen[ep.ID] = true
					eps = append(eps, ep)
				}
			}
		}
	}
	slices.SortFunc(eps, func(a, b Endpoint) int { return strings.Compare(a.ID, b.ID) })
	return eps
}

// Measurement is what runs against one apiserver.
type Measurement interface {
	Run(ctx context.Context)
	Ready() error
	// Windows are the apiserver's known windows, for the fleet's.
	Windows() []collector.Window
	Unregister()
}

// Fleet keeps one Measurement running per known endpoint. An endpoint that
// leaves the list keeps its measurement, its series and its history for a
// grace period: an apiserver that restarts leaves the kubernetes
// EndpointSlice while it is down, and its restart must show as a cache reset
// on the same series, not as a new apiserver.
type Fleet struct {
	start func(Endpoint) (Measurement, error)
	grace time.Duration
	clock clock.PassiveClock
	log   logr.Logger

	listed *prometheus.GaugeVec

	mu      sync.Mutex
	members map[string]*member
}

type member struct {
	m      Measurement
	cancel context.CancelFunc
	done   chan struct{}
	absent time.Time // when it left the list; zero while listed
}

// NewFleet starts measurements with start; grace is how long an endpoint
// that left the list is still measured. The fleet's window series and
// watchcache_apiserver_listed go to reg.
func NewFleet(start func(Endpoint) (Measurement, error), grace time.Duration, clk clock.PassiveClock, reg prometheus.Registerer, log logr.Logger) *Fleet {
	f := &Fleet{
		start: start, grace: grace, clock: clk, log: log, members: map[string]*member{},
		listed: promauto.With(reg).NewGaugeVec(promopts.Gauge("apiserver_listed",
			"1 while the apiserver is listed (a ready endpoint of the kubernetes EndpointSlices, or in --apiservers); 0 while it is absent but still measured, within --apiservers.grace-period, as while it restarts."), []string{"apiserver"}),
	}
	reg.MustRegister(fleetCollector{f})
	return f
}

// Sync starts a measurement for each new endpoint; one no longer listed is
// marked absent, and stopped and its series removed once it has been absent
// for the grace period (see Expire).
func (f *Fleet) Sync(ctx context.Context, eps []Endpoint) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock.Now()
	want := map[string]bool{}
	for _, ep := range eps {
		want[ep.ID] = true
		if mem, ok := f.members[ep.ID]; ok {
			if !mem.absent.IsZero() {
				f.log.Info("apiserver listed again: its measurement, series and history went on", "apiserver", ep.ID, "absentFor", now.Sub(mem.absent).Round(time.Second))
				mem.absent = time.Time{}
				f.listed.WithLabelValues(ep.ID).Set(1)
			}
			continue
		}
		m, err := f.start(ep)
		if err != nil {
			f.log.Error(err, "cannot measure apiserver", "apiserver", ep.ID)
			continue
		}
		mctx, cancel := context.WithCancel(ctx)
		mem := &member{m: m, cancel: cancel, done: make(chan struct{})}
		go func() { defer close(mem.done); m.Run(mctx) }()
		f.members[ep.ID] = mem
		f.listed.WithLabelValues(ep.ID).Set(1)
		f.log.Info("measuring apiserver", "apiserver", ep.ID)
	}
	for id, mem := range f.members {
		if !want[id] && mem.absent.IsZero() {
			mem.absent = now
			f.listed.WithLabelValues(id).Set(0)
			f.log.Info("apiserver no longer listed: still measured for the grace period, so that a restart shows as a cache reset", "apiserver", id, "gracePeriod", f.grace)
		}
	}
	f.expireLocked(now)
}

// Expire stops the measurements of endpoints absent for the grace period,
// and removes their series.
func (f *Fleet) Expire() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expireLocked(f.clock.Now())
}

func (f *Fleet) expireLocked(now time.Time) {
	for id, mem := range f.members {
		if mem.absent.IsZero() || now.Sub(mem.absent) < f.grace {
			continue
		}
		f.remove(id, mem)
		f.log.Info("apiserver gone for the grace period: stopped measuring it and removed its series", "apiserver", id, "gracePeriod", f.grace)
	}
}

// remove stops one member and removes its series; f.mu is held.
func (f *Fleet) remove(id string, mem *member) {
	mem.cancel()
	<-mem.done
	mem.m.Unregister()
	f.listed.DeleteLabelValues(id)
	delete(f.members, id)
}

// Ready fails when no apiserver is measured or a listed one is not ready.
// An absent one is not asked: it is likely down.
func (f *Fleet) Ready() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.members) == 0 {
		return errors.New("no apiserver to measure")
	}
	var errs []error
	for id, mem := range f.members {
		if !mem.absent.IsZero() {
			continue
		}
		if err := mem.m.Ready(); err != nil {
			errs = append(errs, fmt.Errorf("apiserver %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// Stop stops every measurement, waits for them and removes their series:
// the fleet is empty, and a later Sync starts it again.
func (f *Fleet) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, mem := range f.members {
		mem.cancel()
	}
	for id, mem := range f.members {
		f.remove(id, mem)
	}
}

// windows are every measured apiserver's known windows, by apiserver.
func (f *Fleet) windows() map[string][]collector.Window {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string][]collector.Window, len(f.members))
	for id, mem := range f.members {
		out[id] = mem.m.Windows()
	}
	return out
}
