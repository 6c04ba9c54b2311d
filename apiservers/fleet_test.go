package apiservers

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/go-logr/logr"
)

type fakeMeasurement struct {
	mu           sync.Mutex
	running      bool
	unregistered bool
	ready        error
}

func (f *fakeMeasurement) Run(ctx context.Context) {
	f.mu.Lock()
	f.running = true
	f.mu.Unlock()
	<-ctx.Done()
	f.mu.Lock()
	f.running = false
	f.mu.Unlock()
}
func (f *fakeMeasurement) Ready() error { return f.ready }
func (f *fakeMeasurement) Unregister() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running {
		panic("Unregister while running")
	}
	f.unregistered = true
}

func TestFleetSync(t *testing.T) {
	started := map[string]*fakeMeasurement{}
	f := NewFleet(func(ep Endpoint) (Measurement, error) {
		if ep.ID == "bad:443" {
			return nil, errors.New("no client")
		}
		m := &fakeMeasurement{}
		started[ep.ID] = m
		return m, nil
	}, logr.Discard())
	if err := f.Ready(); err == nil {
		t.Error("an empty fleet is ready")
	}
	ctx := t.Context()
	f.Sync(ctx, []Endpoint{FromHost("a"), FromHost("b"), FromHost("bad")})
	if len(started) != 2 || len(f.members) != 2 {
		t.Fatalf("started %v, members %d; want a and b", started, len(f.members))
	}
	started["b:443"].ready = errors.New("watchers not open")
	if err := f.Ready(); err == nil || err.Error() != "apiserver b:443: watchers not open" {
		t.Errorf("Ready() = %v", err)
	}
	a := started["a:443"]
	f.Sync(ctx, []Endpoint{FromHost("b"), FromHost("c")})
	if !a.unregistered || len(f.members) != 2 || started["c:443"] == nil {
		t.Errorf("after a vanished: a unregistered %v, members %d, c started %v", a.unregistered, len(f.members), started["c:443"] != nil)
	}
	// Stop (the lease lost) empties the fleet; a Sync (the lease back) fills it.
	f.Stop()
	if b := started["b:443"]; !b.unregistered || len(f.members) != 0 {
		t.Errorf("after Stop: b unregistered %v, members %d", b.unregistered, len(f.members))
	}
	f.Sync(ctx, []Endpoint{FromHost("b")})
	if len(f.members) != 1 || started["b:443"].unregistered {
		t.Errorf("after a new Sync: members %d", len(f.members))
	}
	f.Stop()
}
