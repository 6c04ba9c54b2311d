package apiservers

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/watchcache/watchcache-exporter/collector"
)

type fakeMeasurement struct {
	mu           sync.Mutex
	running      bool
	unregistered bool
	ready        error
	windows      []collector.Window
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
func (f *fakeMeasurement) Ready() error                { return f.ready }
func (f *fakeMeasurement) Windows() []collector.Window { return f.windows }
func (f *fakeMeasurement) Unregister() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running {
		panic("Unregister while running")
	}
	f.unregistered = true
}

// newTestFleet is a fleet of fakeMeasurements on a fake clock; "bad" fails
// to start.
func newTestFleet(grace time.Duration) (*Fleet, map[string]*fakeMeasurement, *clocktesting.FakePassiveClock, *prometheus.Registry) {
	started := map[string]*fakeMeasurement{}
	clk := clocktesting.NewFakePassiveClock(time.Unix(1e9, 0))
	reg := prometheus.NewRegistry()
	f := NewFleet(func(ep Endpoint) (Measurement, error) {
		if ep.ID == "bad:443" {
			return nil, errors.New("no client")
		}
		m := &fakeMeasurement{}
		started[ep.ID] = m
		return m, nil
	}, grace, clk, reg, logr.Discard())
	return f, started, clk, reg
}

func TestFleetSync(t *testing.T) {
	f, started, _, _ := newTestFleet(0)
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
	// No grace period: a is removed at once.
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

// An apiserver that leaves the list keeps its measurement for the grace
// period: back in time, it is the same measurement (a restart shows as a
// cache reset on its series); gone for longer, it is removed.
func TestFleetGracePeriod(t *testing.T) {
	f, started, clk, reg := newTestFleet(time.Minute)
	ctx := t.Context()
	defer f.Stop()
	f.Sync(ctx, []Endpoint{FromHost("a"), FromHost("b")})
	a, b := started["a:443"], started["b:443"]
	listed := func(want string) {
		t.Helper()
		if err := testutil.CollectAndCompare(f.listed, strings.NewReader(`
# HELP watchcache_apiserver_listed 1 while the apiserver is listed (a ready endpoint of the kubernetes EndpointSlices, or in --apiservers); 0 while it is absent but still measured, within --apiservers.grace-period, as while it restarts.
# TYPE watchcache_apiserver_listed gauge
`+want)); err != nil {
			t.Error(err)
		}
	}
	listed("watchcache_apiserver_listed{apiserver=\"a:443\"} 1\nwatchcache_apiserver_listed{apiserver=\"b:443\"} 1\n")

	// b restarts: it leaves the slices for 40 s and comes back.
	f.Sync(ctx, []Endpoint{FromHost("a")})
	b.ready = errors.New("watchers closed") // an absent apiserver is not asked
	if err := f.Ready(); err != nil {
		t.Errorf("Ready() with b absent = %v, want nil", err)
	}
	listed("watchcache_apiserver_listed{apiserver=\"a:443\"} 1\nwatchcache_apiserver_listed{apiserver=\"b:443\"} 0\n")
	clk.SetTime(clk.Now().Add(40 * time.Second))
	f.Expire()
	f.Sync(ctx, []Endpoint{FromHost("a"), FromHost("b")})
	if started["b:443"] != b || b.unregistered {
		t.Fatalf("b back within the grace period: started again %v, unregistered %v; want the same measurement", started["b:443"] != b, b.unregistered)
	}
	if err := f.Ready(); err == nil {
		t.Error("b listed again and not ready, yet the fleet is ready")
	}
	b.ready = nil

	// b leaves for good: removed once a minute has passed, by Expire as
	// well as by a Sync.
	f.Sync(ctx, []Endpoint{FromHost("a")})
	clk.SetTime(clk.Now().Add(59 * time.Second))
	f.Expire()
	if b.unregistered {
		t.Fatal("b removed before its grace period ended")
	}
	clk.SetTime(clk.Now().Add(time.Second))
	f.Expire()
	if !b.unregistered || len(f.members) != 1 {
		t.Errorf("b gone for the grace period: unregistered %v, members %d", b.unregistered, len(f.members))
	}
	listed("watchcache_apiserver_listed{apiserver=\"a:443\"} 1\n")
	// The same name later is a new apiserver.
	f.Sync(ctx, []Endpoint{FromHost("a"), FromHost("b")})
	if started["b:443"] == b {
		t.Error("b listed after its removal reuses the old measurement")
	}
	f.Sync(ctx, []Endpoint{FromHost("b")})
	clk.SetTime(clk.Now().Add(2 * time.Minute))
	f.Sync(ctx, []Endpoint{FromHost("b")})
	if !a.unregistered {
		t.Error("a, absent for two minutes, is still measured after a Sync")
	}
	if n, err := testutil.GatherAndCount(reg, "watchcache_apiserver_listed"); err != nil || n != 1 {
		t.Errorf("listed series %d (%v), want 1", n, err)
	}
}

func TestFleetWindows(t *testing.T) {
	nan := math.NaN()
	cm := func(oldest uint64, seconds float64, lower bool) collector.Window {
		return collector.Window{Resource: "configmaps", Oldest: oldest, Seconds: seconds, LowerBound: lower}
	}
	pods := func(oldest uint64, seconds float64) collector.Window {
		return collector.Window{Resource: "pods", Oldest: oldest, Seconds: seconds}
	}
	for _, tc := range []struct {
		name string
		in   map[string][]collector.Window
		want map[string]FleetWindow
	}{{
		name: "one apiserver is its own fleet",
		in:   map[string][]collector.Window{"a": {cm(100, 80, false)}},
		want: map[string]FleetWindow{"configmaps": {cm(100, 80, false), 1}},
	}, {
		name: "a restarted apiserver's young cache binds the fleet",
		in: map[string][]collector.Window{
			"a": {cm(100, 80, false), pods(50, 120)},
			"b": {cm(5000, 12, false), pods(5000, 12)},
			"c": {cm(120, 79, false)},
		},
		want: map[string]FleetWindow{"configmaps": {cm(5000, 12, false), 3}, "pods": {pods(5000, 12), 2}},
	}, {
		name: "the lower bound follows the binding apiserver",
		in: map[string][]collector.Window{
			"a": {cm(300, 200, true)},
			"b": {cm(100, 250, false)},
		},
		want: map[string]FleetWindow{"configmaps": {cm(300, 200, true), 2}},
	}, {
		name: "of equal oldest RVs, the known shorter window",
		in: map[string][]collector.Window{
			"a": {cm(300, nan, false)},
			"b": {cm(300, 70, false)},
			"c": {cm(300, 71, false)},
		},
		want: map[string]FleetWindow{"configmaps": {cm(300, 70, false), 3}},
	}, {
		name: "a binding apiserver whose clock cannot tell gives an unknown window, not another's",
		in: map[string][]collector.Window{
			"a": {cm(400, nan, false)},
			"b": {cm(300, 70, false)},
		},
		want: map[string]FleetWindow{"configmaps": {cm(400, nan, false), 2}},
	}, {
		name: "no window known",
		in:   map[string][]collector.Window{"a": nil},
		want: map[string]FleetWindow{},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := FleetWindows(tc.in)
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for _, g := range got {
				w := tc.want[g.Resource]
				if g.Oldest != w.Oldest || g.Apiservers != w.Apiservers || g.LowerBound != w.LowerBound ||
					!(g.Seconds == w.Seconds || math.IsNaN(g.Seconds) && math.IsNaN(w.Seconds)) {
					t.Errorf("%s: got %+v, want %+v", g.Resource, g, w)
				}
			}
		})
	}
}

// The fleet's series, as scraped.
func TestFleetCollector(t *testing.T) {
	f, started, _, reg := newTestFleet(time.Minute)
	defer f.Stop()
	f.Sync(t.Context(), []Endpoint{FromHost("a"), FromHost("b")})
	started["a:443"].windows = []collector.Window{{Resource: "configmaps", Oldest: 1000, Seconds: 80}, {Group: "coordination.k8s.io", Resource: "leases", Oldest: 900, Seconds: 95, LowerBound: true}}
	started["b:443"].windows = []collector.Window{{Resource: "configmaps", Oldest: 1900, Seconds: 9.5}}
	err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP watchcache_fleet_oldest_resource_version The oldest resourceVersion every measured apiserver serves a watch from: the largest of their oldest resourceVersions.
# TYPE watchcache_fleet_oldest_resource_version gauge
watchcache_fleet_oldest_resource_version{group="",resource="configmaps"} 1900
watchcache_fleet_oldest_resource_version{group="coordination.k8s.io",resource="leases"} 900
# HELP watchcache_fleet_window_apiservers Apiservers whose window of the resource is known, and so taken into the fleet's window; fewer than the apiservers measured while one does not answer.
# TYPE watchcache_fleet_window_apiservers gauge
watchcache_fleet_window_apiservers{group="",resource="configmaps"} 2
watchcache_fleet_window_apiservers{group="coordination.k8s.io",resource="leases"} 1
# HELP watchcache_fleet_window_lower_bound 1 when watchcache_fleet_window_seconds is only a lower bound (see watchcache_window_lower_bound).
# TYPE watchcache_fleet_window_lower_bound gauge
watchcache_fleet_window_lower_bound{group="",resource="configmaps"} 0
watchcache_fleet_window_lower_bound{group="coordination.k8s.io",resource="leases"} 1
# HELP watchcache_fleet_window_seconds History window that holds on every measured apiserver at once: now minus the time at which watchcache_fleet_oldest_resource_version was written. A client that may reconnect to any apiserver keeps its resourceVersion for this long. Only a lower bound where watchcache_fleet_window_lower_bound is 1.
# TYPE watchcache_fleet_window_seconds gauge
watchcache_fleet_window_seconds{group="",resource="configmaps"} 9.5
watchcache_fleet_window_seconds{group="coordination.k8s.io",resource="leases"} 95
`), "watchcache_fleet_window_seconds", "watchcache_fleet_oldest_resource_version", "watchcache_fleet_window_lower_bound", "watchcache_fleet_window_apiservers")
	if err != nil {
		t.Error(err)
	}
	// A standby measures nothing, and exposes no fleet series.
	f.Stop()
	if n, err := testutil.GatherAndCount(reg, "watchcache_fleet_window_seconds"); err != nil || n != 0 {
		t.Errorf("fleet series after Stop: %d (%v), want none", n, err)
	}
}
