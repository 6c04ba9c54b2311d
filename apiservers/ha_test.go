package apiservers_test

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/watchcache/watchcache-exporter/test/exportertest"
	"github.com/watchcache/watchcache-exporter/test/testcluster"
	"github.com/watchcache/watchcache-exporter/test/testnetns"
)

// The replicas' addresses, in the test's own network namespace.
var replicaAddrs = []string{"10.201.0.11", "10.201.0.12", "10.201.0.13"}

const (
	haNS     = "watchcache-ha"
	haPort   = 6443
	haRate   = 20 // writes/s: an 80 s window (1600 events)
	haGrace  = 60 * time.Second
	apart    = time.Minute // between the restarts of the rolling restart
	fresh    = 40.0        // s: a window this short is a rebuilt cache's
	grown    = 60.0        // s: a window this long has grown back
	maxDrop  = 5.0         // s: the most an untouched window falls between samples
	sampleEv = 2 * time.Second
)

// TestHA runs three kube-apiservers on one etcd, each on an address of its
// own that the real lease endpoint reconciler publishes in the kubernetes
// EndpointSlice, and an exporter in --apiservers=discover mode that reaches
// the control plane through a front door (as a pod does through the
// Service). It starts with two replicas, adds a third, restarts them one at
// a time a minute apart under load, then stops one for good. The measured
// set must follow the slices; each restart must be a cache reset of that
// replica only, whose window starts again near zero and grows, with the
// fleet's window following the shortest and no series of a restarted
// replica lost; an RV from just before each restart must be refused by the
// restarted replica and served by the others exactly as the exporter's
// oldest RVs say.
func TestHA(t *testing.T) {
	testnetns.Run(t, replicaAddrs, testHA)
}

func testHA(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Address: replicaAddrs[0], OtherAddresses: replicaAddrs[1:], Port: haPort})
	ctx := t.Context()
	if _, err := c.AddAPIServerAt(ctx, replicaAddrs[1]); err != nil {
		t.Fatal(err)
	}
	front := frontDoor(t, c)
	admin := kubernetes.NewForConfigOrDie(front)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: haNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	exp := exportertest.Start(t, front, "--namespace="+haNS, "--apiservers=discover",
		"--apiservers.grace-period="+haGrace.String(), "--load.rate="+strconv.Itoa(haRate))
	id := func(i int) string { return net.JoinHostPort(replicaAddrs[i], strconv.Itoa(haPort)) }

	// Discovery: two replicas, then three.
	waitMeasured(t, exp, "two replicas measured", id(0), id(1))
	t.Logf("EndpointSlice lists %v", sliceAddrs(t, admin))
	if _, err := c.AddAPIServerAt(ctx, replicaAddrs[2]); err != nil {
		t.Fatal(err)
	}
	waitMeasured(t, exp, "the third replica measured", id(0), id(1), id(2))
	t.Logf("EndpointSlice lists %v", sliceAddrs(t, admin))

	s := startSampler(t, exp, []string{id(0), id(1), id(2)})
	exp.WaitFor(t, 4*time.Minute, "every replica's window to grow", func(m exportertest.Metrics) bool {
		for i := range replicaAddrs {
			if w, err := m.Get("watchcache_window_seconds", "apiserver", id(i), "resource", "configmaps"); err != nil || !(w >= grown) {
				return false
			}
		}
		return true
	})

	// The rolling restart.
	type restart struct {
		replica           int
		stop, resetSeen   time.Time
		rv                uint64
		refused, exporter map[int]bool // by replica: the apiserver's answer, the exporter's word
	}
	var restarts []restart
	for i, a := range c.APIServers() {
		before := exp.Scrape(t)
		resets0 := before.Value(t, "watchcache_cache_resets_total", "apiserver", id(i))
		// An informer's RV, from another replica just before the restart.
		other := c.APIServers()[(i+1)%3]
		rv := listRV(t, other.AdminConfig())
		r := restart{replica: i, stop: time.Now(), rv: rv}
		t.Logf("restarting %s (RV %d from %s)", id(i), rv, other.URL())
		if err := a.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s ready again after %s", id(i), time.Since(r.stop).Round(100*time.Millisecond))
		exp.WaitFor(t, time.Minute, "the reset of "+id(i), func(m exportertest.Metrics) bool {
			v, err := m.Get("watchcache_cache_resets_total", "apiserver", id(i))
			return err == nil && v > resets0
		})
		r.resetSeen = time.Now()
		// What the exporter says each replica serves, then what each says.
		m := exp.Scrape(t)
		r.refused, r.exporter = map[int]bool{}, map[int]bool{}
		for j, b := range c.APIServers() {
			oldest := m.Value(t, "watchcache_oldest_resource_version", "apiserver", id(j), "resource", "configmaps")
			r.exporter[j] = float64(rv) < oldest
			refused, o := watchFrom(t, b.AdminConfig(), rv)
			r.refused[j] = refused
			t.Logf("RV %d on %s: refused %v (apiserver's oldest %d), exporter's oldest %.0f", rv, id(j), refused, o, oldest)
		}
		restarts = append(restarts, r)
		if i < 2 {
			time.Sleep(time.Until(r.stop.Add(apart)))
			// However long the restart took on a busy machine, the
			// restarted replica's window grows more than 20 s past its
			// value just after the reset before the next restart ends
			// this one's samples.
			w0, err := m.Get("watchcache_window_seconds", "apiserver", id(i), "resource", "configmaps")
			if err != nil {
				w0 = math.NaN()
			}
			exp.WaitFor(t, 2*time.Minute, id(i)+"'s window grown past the reset", func(m exportertest.Metrics) bool {
				w, err := m.Get("watchcache_window_seconds", "apiserver", id(i), "resource", "configmaps")
				if err != nil || math.IsNaN(w) {
					return false
				}
				if math.IsNaN(w0) {
					w0 = w
				}
				return w > w0+22
			})
		}
	}
	exp.WaitFor(t, 3*time.Minute, "the fleet window to grow back", func(m exportertest.Metrics) bool {
		w, err := m.Get("watchcache_fleet_window_seconds", "resource", "configmaps")
		return err == nil && w >= grown
	})
	recovered := time.Now()

	// One replica leaves for good: its series go after the grace period.
	gone := 1
	// From SIGTERM: the apiserver leaves the slice as its shutdown begins.
	stopped := time.Now()
	if err := c.APIServers()[gone].Stop(); err != nil {
		t.Fatal(err)
	}
	exp.WaitFor(t, haGrace+time.Minute, id(gone)+"'s series removed", func(m exportertest.Metrics) bool {
		_, err := m.Get("watchcache_apiserver_listed", "apiserver", id(gone))
		return err != nil
	})
	removedAfter := time.Since(stopped)
	t.Logf("EndpointSlice lists %v", sliceAddrs(t, admin))
	end := exp.Scrape(t)
	s.stop()
	for _, i := range []int{0, 2} {
		if v, err := end.Get("watchcache_apiserver_listed", "apiserver", id(i)); err != nil || v != 1 {
			t.Errorf("%s after %s left: listed %v (%v), want 1", id(i), id(gone), v, err)
		}
	}
	if _, err := end.Get("watchcache_window_seconds", "apiserver", id(gone), "resource", "configmaps"); err == nil {
		t.Errorf("%s's window series still exposed after the grace period", id(gone))
	}
	if removedAfter < haGrace {
		t.Errorf("%s's series removed %s after it stopped, before the grace period of %s", id(gone), removedAfter.Round(time.Second), haGrace)
	}
	t.Logf("%s stopped for good: series removed after %s (grace period %s)", id(gone), removedAfter.Round(time.Second), haGrace)

	// The samples, restart by restart.
	samples := s.all()
	for k, r := range restarts {
		until := recovered
		if k+1 < len(restarts) {
			until = restarts[k+1].stop
		}
		x := id(r.replica)
		var during []haSample
		for _, sm := range samples {
			if !sm.at.Before(r.stop) && sm.at.Before(until) {
				during = append(during, sm)
			}
		}
		if len(during) < 10 {
			t.Fatalf("restart of %s: %d samples", x, len(during))
		}
		first, lastS := during[0], during[len(during)-1]
		// Each restart is one reset, of that replica only.
		for i := range replicaAddrs {
			d := lastS.resets[id(i)] - first.resets[id(i)]
			want := 0.0
			if i == r.replica {
				want = 1
			}
			if d != want {
				t.Errorf("restart of %s: resets of %s went up by %v, want %v", x, id(i), d, want)
			}
		}
		// Its window starts again near zero and grows.
		var after []haSample
		for _, sm := range during {
			if !sm.at.Before(r.resetSeen) && !math.IsNaN(sm.window[x]) {
				after = append(after, sm)
			}
		}
		if len(after) < 5 {
			t.Fatalf("restart of %s: %d samples with its window after the reset", x, len(after))
		}
		w0, w1 := after[0].window[x], after[len(after)-1].window[x]
		if !(w0 < fresh) || !(w1 > w0+20) {
			t.Errorf("restart of %s: window %.1f s just after the reset, %.1f s at the end; want under %v s, then at least 20 s more", x, w0, w1, fresh)
		}
		// The fleet's window is the shortest history's (the replica with the
		// largest oldest RV), and drops with it.
		minFleet := math.Inf(1)
		for _, sm := range during {
			if oldest, window, ok := sm.newestOldest(); ok && !within(sm.fleet, window, 2) {
				t.Errorf("restart of %s, at %s: fleet window %.1f s at RV %.0f, want the shortest history's: %.1f s at RV %.0f (replicas' oldest RVs %v, windows %v)",
					x, sm.at.Format(time.TimeOnly), sm.fleet, sm.fleetOldest, window, oldest, sm.oldest, sm.window)
			}
			if sm.fleet < minFleet {
				minFleet = sm.fleet
			}
			if sm.fleetOldest < sm.oldest[x] && !sm.at.Before(r.resetSeen) {
				t.Errorf("restart of %s: fleet's oldest RV %.0f below the restarted replica's %.0f", x, sm.fleetOldest, sm.oldest[x])
			}
		}
		if !(minFleet < fresh) {
			t.Errorf("restart of %s: the fleet window never dropped under %v s (lowest %.1f s)", x, fresh, minFleet)
		}
		// The other replicas' windows are untouched.
		for i := range replicaAddrs {
			o := id(i)
			if i == r.replica {
				continue
			}
			for j := 1; j < len(during); j++ {
				prev, cur := during[j-1].window[o], during[j].window[o]
				if cur < prev-maxDrop {
					t.Errorf("restart of %s: %s's window fell from %.1f s to %.1f s at %s", x, o, prev, cur, during[j].at.Format(time.TimeOnly))
				}
			}
		}
		// The apiservers refuse the RV exactly where the exporter said.
		for j := range replicaAddrs {
			if r.refused[j] != r.exporter[j] {
				t.Errorf("restart of %s: RV %d on %s refused %v, but the exporter's oldest RV said refused %v", x, r.rv, id(j), r.refused[j], r.exporter[j])
			}
		}
		if !r.refused[r.replica] || r.refused[(r.replica+1)%3] {
			t.Errorf("restart of %s: RV %d refused by it %v, by %s %v; want refused by the restarted replica only", x, r.rv, r.refused[r.replica], id((r.replica+1)%3), r.refused[(r.replica+1)%3])
		}
		// It left the slices while down, and kept its series (below).
		if countUnlisted(during, x) == 0 {
			t.Errorf("restart of %s: never out of the EndpointSlices: the grace period was not exercised", x)
		}
		t.Logf("restart of %s: reset seen %s after the stop; its window %.1f s after the reset, %.1f s %s later; fleet window %.1f s before, lowest %.1f s, %.1f s at the end; listed 0 in %d of %d samples",
			x, r.resetSeen.Sub(r.stop).Round(100*time.Millisecond), w0, w1, lastS.at.Sub(after[0].at).Round(time.Second),
			first.fleet, minFleet, lastS.fleet, countUnlisted(during, x), len(during))
		for i := range replicaAddrs {
			t.Logf("  %s: window %.1f s before, %.1f s at the end", id(i), first.window[id(i)], lastS.window[id(i)])
		}
	}
	// No series of a restarted replica was lost: every sample has them,
	// and counters never went back.
	for _, sm := range samples {
		if sm.at.After(stopped) {
			break
		}
		for i := range replicaAddrs {
			if !sm.present[id(i)] {
				t.Errorf("at %s: the series of %s are missing", sm.at.Format(time.TimeOnly), id(i))
			}
		}
	}
}

// haSample is one scrape of the exporter.
type haSample struct {
	at                 time.Time
	window, oldest     map[string]float64 // configmaps, by apiserver
	resets, listed     map[string]float64
	present            map[string]bool // window and listed series exposed
	fleet, fleetOldest float64
}

// newestOldest is the replicas' largest oldest RV, the shortest history,
// and that replica's window (of equals, the shorter), when all three are
// known. By RVs, not by the windows' seconds: each replica's window is
// timed when its probe answers, up to a probe interval (and its latency on
// a busy machine) apart, and grows meanwhile until its cache is full.
func (s haSample) newestOldest() (oldest, window float64, ok bool) {
	oldest = math.Inf(-1)
	for id, o := range s.oldest {
		w := s.window[id]
		if math.IsNaN(w) || math.IsNaN(o) {
			return 0, 0, false
		}
		if o > oldest || o == oldest && w < window {
			oldest, window = o, w
		}
	}
	return oldest, window, len(s.oldest) == len(replicaAddrs) && len(s.window) == len(replicaAddrs)
}

func countUnlisted(ss []haSample, id string) int {
	n := 0
	for _, s := range ss {
		if s.listed[id] == 0 {
			n++
		}
	}
	return n
}

type sampler struct {
	mu      sync.Mutex
	samples []haSample
	cancel  context.CancelFunc
	done    chan struct{}
}

// startSampler scrapes the exporter every sampleEv until stop.
func startSampler(t *testing.T, exp *exportertest.Exporter, ids []string) *sampler {
	ctx, cancel := context.WithCancel(t.Context())
	s := &sampler{cancel: cancel, done: make(chan struct{})}
	get := func(m exportertest.Metrics, name string, pairs ...string) (float64, bool) {
		v, err := m.Get(name, pairs...)
		if err != nil {
			return math.NaN(), false
		}
		return v, true
	}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(sampleEv)
		defer tick.Stop()
		for {
			if m, err := exp.TryScrape(); err == nil {
				sm := haSample{at: time.Now(), window: map[string]float64{}, oldest: map[string]float64{},
					resets: map[string]float64{}, listed: map[string]float64{}, present: map[string]bool{}}
				for _, id := range ids {
					var ok1, ok2 bool
					sm.window[id], ok1 = get(m, "watchcache_window_seconds", "apiserver", id, "resource", "configmaps")
					sm.oldest[id], _ = get(m, "watchcache_oldest_resource_version", "apiserver", id, "resource", "configmaps")
					sm.resets[id], _ = get(m, "watchcache_cache_resets_total", "apiserver", id)
					sm.listed[id], ok2 = get(m, "watchcache_apiserver_listed", "apiserver", id)
					sm.present[id] = ok1 && ok2
				}
				sm.fleet, _ = get(m, "watchcache_fleet_window_seconds", "resource", "configmaps")
				sm.fleetOldest, _ = get(m, "watchcache_fleet_oldest_resource_version", "resource", "configmaps")
				s.mu.Lock()
				s.samples = append(s.samples, sm)
				s.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(s.stop)
	return s
}

func (s *sampler) stop() { s.cancel(); <-s.done }

func (s *sampler) all() []haSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.samples)
}

// waitMeasured waits until the exporter measures exactly ids.
func waitMeasured(t *testing.T, exp *exportertest.Exporter, what string, ids ...string) {
	t.Helper()
	var got []string
	exp.WaitFor(t, 90*time.Second, what, func(m exportertest.Metrics) bool {
		got = got[:0]
		for _, x := range m["watchcache_apiserver_listed"].GetMetric() {
			for _, l := range x.GetLabel() {
				if l.GetName() == "apiserver" && x.GetGauge().GetValue() == 1 {
					got = append(got, l.GetValue())
				}
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, ids) {
			return false
		}
		for _, id := range ids {
			if w, err := m.Get("watchcache_window_seconds", "apiserver", id, "resource", "configmaps"); err != nil || math.IsNaN(w) {
				return false
			}
		}
		return true
	})
	t.Logf("%s: %v", what, got)
}

// sliceAddrs are the addresses of the kubernetes EndpointSlice, as the
// apiservers' lease reconciler published them.
func sliceAddrs(t *testing.T, cs kubernetes.Interface) []string {
	t.Helper()
	l, err := cs.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).List(t.Context(), metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=kubernetes"})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range l.Items {
		for _, e := range s.Endpoints {
			out = append(out, e.Addresses...)
		}
	}
	slices.Sort(out)
	return out
}

// listRV is the current resourceVersion, from a list on one apiserver, as
// an informer gets it.
func listRV(t *testing.T, cfg *rest.Config) uint64 {
	t.Helper()
	l, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps(haNS).List(t.Context(), metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	rv, err := strconv.ParseUint(l.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return rv
}

var tooOld = regexp.MustCompile(`too old resource version: \d+ \((\d+)\)`)

// watchFrom opens a watch from rv on one apiserver and says whether it was
// refused with 410, and the oldest RV its refusal names.
func watchFrom(t *testing.T, cfg *rest.Config, rv uint64) (refused bool, oldest uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	w, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps(haNS).Watch(ctx, metav1.ListOptions{
		ResourceVersion: strconv.FormatUint(rv, 10), FieldSelector: "metadata.name=no-such-configmap",
	})
	if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return true, 0
	}
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatalf("watch from %d on %s closed at once", rv, cfg.Host)
		}
		if ev.Type != watch.Error {
			t.Fatalf("watch from %d on %s: %s event for a name that does not exist", rv, cfg.Host, ev.Type)
		}
		st := apierrors.FromObject(ev.Object)
		var se apierrors.APIStatus
		if !errors.As(st, &se) || se.Status().Code != 410 {
			t.Fatalf("watch from %d on %s: %v", rv, cfg.Host, st)
		}
		if m := tooOld.FindStringSubmatch(se.Status().Message); m != nil {
			oldest, _ = strconv.ParseUint(m[1], 10, 64)
		}
		return true, oldest
	case <-time.After(2 * time.Second):
		return false, 0 // served: nothing to send
	}
}

// frontDoor is what the kubernetes Service is to a pod: a TCP address on
// loopback that reaches whichever apiserver answers, trying them in turn.
// It returns an admin config through it.
func frontDoor(t *testing.T, c *testcluster.Cluster) *rest.Config {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	track := func(cs ...net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if conns == nil {
			return false // closing
		}
		for _, x := range cs {
			conns[x] = true
		}
		return true
	}
	next := 0
	dial := func() (net.Conn, error) {
		var errs []error
		as := c.APIServers()
		for range as {
			mu.Lock()
			a := as[next%len(as)]
			next++
			mu.Unlock()
			u, _ := url.Parse(a.URL())
			b, err := net.DialTimeout("tcp", u.Host, time.Second)
			if err == nil {
				return b, nil
			}
			errs = append(errs, err)
		}
		return nil, errors.Join(errs...)
	}
	wg.Go(func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := dial()
			if err != nil {
				in.Close()
				continue
			}
			if !track(in, out) {
				in.Close()
				out.Close()
				return
			}
			for _, p := range [][2]net.Conn{{in, out}, {out, in}} {
				wg.Go(func() {
					_, _ = io.Copy(p[0], p[1])
					p[0].Close()
					p[1].Close()
				})
			}
		}
	})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for x := range conns {
			x.Close()
		}
		conns = nil
		mu.Unlock()
		wg.Wait()
	})
	cfg := c.AdminConfig()
	cfg.Host = "https://" + l.Addr().String()
	return cfg
}

func within(got, want, abs float64) bool {
	return !math.IsNaN(got) && !math.IsNaN(want) && math.Abs(got-want) <= abs
}
