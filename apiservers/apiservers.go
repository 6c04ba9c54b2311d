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

	"github.com/go-logr/logr"
	discoveryv1 "k8s.io/api/discovery/v1"
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
	Unregister()
}

// Fleet keeps one Measurement running per known endpoint.
type Fleet struct {
	start func(Endpoint) (Measurement, error)
	log   logr.Logger

	mu      sync.Mutex
	members map[string]*member
}

type member struct {
	m      Measurement
	cancel context.CancelFunc
	done   chan struct{}
}

// NewFleet starts measurements with start.
func NewFleet(start func(Endpoint) (Measurement, error), log logr.Logger) *Fleet {
	return &Fleet{start: start, log: log, members: map[string]*member{}}
}

// Sync starts a measurement for each new endpoint, and stops and removes the
// series of each one no longer listed.
func (f *Fleet) Sync(ctx context.Context, eps []Endpoint) {
	f.mu.Lock()
	defer f.mu.Unlock()
	want := map[string]bool{}
	for _, ep := range eps {
		want[ep.ID] = true
		if _, ok := f.members[ep.ID]; ok {
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
		f.log.Info("measuring apiserver", "apiserver", ep.ID)
	}
	for id, mem := range f.members {
		if !want[id] {
			mem.cancel()
			<-mem.done
			mem.m.Unregister()
			delete(f.members, id)
			f.log.Info("apiserver gone: stopped measuring it and removed its series", "apiserver", id)
		}
	}
}

// Ready fails when no apiserver is measured or one is not ready.
func (f *Fleet) Ready() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.members) == 0 {
		return errors.New("no apiserver to measure")
	}
	var errs []error
	for id, mem := range f.members {
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
		<-mem.done
		mem.m.Unregister()
		delete(f.members, id)
	}
}
