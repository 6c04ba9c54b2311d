package apiservers_test

import (
	"math"
	"net/url"
	"strconv"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/watchcache/watchcache-exporter/test/blackhole"
	"github.com/watchcache/watchcache-exporter/test/exportertest"
	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

const (
	outageNS   = "watchcache-outage"
	outageRate = 20 // writes/s: an 80 s window
)

// TestOutage cuts the exporter off one of two apiservers, as a dropped
// route does (no answer, not a refusal), while its load goes on through the
// other: once for less than the window, across a cycle's 410, and once for
// longer than the window. Neither is a cache reset, which the apiserver,
// never restarted, confirms by serving exactly what the exporter says it
// does afterwards; the cycles whose 410 came in the outage are discarded,
// not stamped late; the other apiserver's measurement goes on untouched.
func TestOutage(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{})
	ctx := t.Context()
	cut, err := c.AddAPIServer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(cut.URL())
	px := blackhole.Start(t, u.Host)
	admin := kubernetes.NewForConfigOrDie(c.AdminConfig())
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: outageNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	direct, _ := url.Parse(c.APIServer().URL())
	// The load and the Lease go to the first apiserver: the kubeconfig's.
	exp := exportertest.Start(t, c.AdminConfig(), "--namespace="+outageNS, "--load.rate="+strconv.Itoa(outageRate),
		"--apiservers=https://"+direct.Host+",https://"+px.Addr)
	other, id := direct.Host, px.Addr
	sum := func(m exportertest.Metrics, name, apiserver string, pairs ...string) float64 {
		s := 0.0
		for _, x := range m[name].GetMetric() {
			if labelsHave(x.GetLabel(), append([]string{"apiserver", apiserver}, pairs...)...) {
				s += x.GetCounter().GetValue()
			}
		}
		return s
	}
	cycles := func(m exportertest.Metrics, apiserver string) float64 {
		return sum(m, "watchcache_expiry_cycles_total", apiserver)
	}
	exp.WaitFor(t, 4*time.Minute, "a first cycle on each apiserver, the caches full", func(m exportertest.Metrics) bool {
		return cycles(m, id) >= 1 && cycles(m, other) >= 1
	})

	type counts struct{ resets, unknown, gaps, cycles, otherCycles, otherResets float64 }
	read := func(m exportertest.Metrics) counts {
		return counts{
			resets:      m.Value(t, "watchcache_cache_resets_total", "apiserver", id),
			unknown:     m.Value(t, "watchcache_cache_resets_unknown_total", "apiserver", id),
			gaps:        m.Value(t, "watchcache_expiry_cycles_discarded_total", "apiserver", id, "reason", "probe_gap"),
			cycles:      cycles(m, id),
			otherCycles: cycles(m, other),
			otherResets: m.Value(t, "watchcache_cache_resets_total", "apiserver", other),
		}
	}
	// outage blackholes the proxy for d, then waits for the window to be
	// known again, and returns the counts before and after.
	outage := func(d time.Duration) (before, after counts) {
		before = read(exp.Scrape(t))
		lastOK := exp.Scrape(t).Value(t, "watchcache_last_probe_success_timestamp_seconds", "apiserver", id)
		px.Hole()
		t.Logf("%s blackholed for %s", id, d)
		time.Sleep(d)
		px.Restore()
		exp.WaitFor(t, time.Minute, id+"'s window probe answered again", func(m exportertest.Metrics) bool {
			v, err := m.Get("watchcache_last_probe_success_timestamp_seconds", "apiserver", id)
			w, err2 := m.Get("watchcache_window_seconds", "apiserver", id, "resource", "configmaps")
			return err == nil && err2 == nil && v > lastOK+d.Seconds() && !math.IsNaN(w)
		})
		// A probe interval more, for the cycle that the refusal ends.
		time.Sleep(2 * time.Second)
		return before, read(exp.Scrape(t))
	}
	// checkServed compares what the exporter says the cut apiserver serves
	// with what it answers itself: an RV just past the exporter's oldest is
	// served, the oldest itself is what a refusal names.
	checkServed := func(what string) {
		m := exp.Scrape(t)
		oldest := uint64(m.Value(t, "watchcache_oldest_resource_version", "apiserver", id, "resource", "configmaps"))
		refused, o := watchFrom(t, cut.AdminConfig(), 1)
		if !refused || o == 0 {
			t.Fatalf("%s: a watch from RV 1 on %s: refused %v, oldest %d", what, cut.URL(), refused, o)
		}
		// The cache moves on at the load's rate while the probe's answer
		// is read and this one asked: a few seconds' writes.
		if o < oldest || o > oldest+10*outageRate {
			t.Errorf("%s: %s names %d its oldest RV, the exporter %d: want the same but for the writes since", what, cut.URL(), o, oldest)
		}
		t.Logf("%s: oldest RV %d by the exporter, %d by the apiserver", what, oldest, o)
	}

	// Less than the window, across a 410: wait until the running cycle's
	// stale RV is about 5 s from its refusal.
	exp.WaitFor(t, 2*time.Minute, "the running cycle near its refusal", func(m exportertest.Metrics) bool {
		d, err := m.Get("watchcache_stale_distance_live_resource_versions", "apiserver", id)
		return err == nil && d < 0 && d > -5*outageRate
	})
	short := 20 * time.Second
	before, after := outage(short)
	t.Logf("after %s: %+v, before %+v", short, after, before)
	if after.gaps != before.gaps+1 {
		t.Errorf("%s outage across a 410: %v cycles discarded for the gap, want 1", short, after.gaps-before.gaps)
	}
	if after.cycles != before.cycles {
		t.Errorf("%s outage across a 410: %v cycles completed, want 0 (their 410 came in the gap)", short, after.cycles-before.cycles)
	}
	if after.resets != before.resets || after.unknown != before.unknown {
		t.Errorf("%s outage, shorter than the window: resets +%v, unknown +%v, want neither", short, after.resets-before.resets, after.unknown-before.unknown)
	}
	checkServed("after the short outage")

	// Longer than the window (80 s at this rate).
	long := 120 * time.Second
	before, after = outage(long)
	t.Logf("after %s: %+v, before %+v", long, after, before)
	if after.resets != before.resets {
		t.Errorf("%s outage of an apiserver that never restarted counted as %v cache resets", long, after.resets-before.resets)
	}
	if after.unknown != before.unknown+1 {
		t.Errorf("%s outage, longer than the window: %v resets counted as unknowable, want 1", long, after.unknown-before.unknown)
	}
	if after.gaps != before.gaps+1 {
		t.Errorf("%s outage: %v cycles discarded for the gap, want the one whose 410 came in it", long, after.gaps-before.gaps)
	}
	checkServed("after the long outage")
	if after.otherResets != 0 || after.otherCycles <= before.otherCycles {
		t.Errorf("%s, never cut off: %v resets and %v cycles during the outage, want 0 and some", other, after.otherResets, after.otherCycles-before.otherCycles)
	}

	// The measurement goes on: a cycle runs again, its stale RV served.
	exp.WaitFor(t, 30*time.Second, "a cycle running after the outages", func(m exportertest.Metrics) bool {
		d, err := m.Get("watchcache_stale_distance_live_resource_versions", "apiserver", id)
		return err == nil && d < 0
	})
}

// labelsHave says whether ls include every pair of kv.
func labelsHave(ls []*dto.LabelPair, kv ...string) bool {
	for i := 0; i+1 < len(kv); i += 2 {
		found := false
		for _, l := range ls {
			if l.GetName() == kv[i] && l.GetValue() == kv[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
