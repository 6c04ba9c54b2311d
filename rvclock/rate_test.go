package rvclock

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A passive exporter polls the current RV every second while the cluster
// writes 100/s; polls fail for 30 s, then resume. The rate after the gap is
// the gap's average, not the whole jump in one interval, and the cluster's
// counter goes while nothing is known.
func TestRatesAfterGap(t *testing.T) {
	hist := NewHistory(16)
	reg := prometheus.NewRegistry()
	r := NewRates(hist, true, time.Second, reg)
	start := time.Now()
	at := func(s int) time.Time { return start.Add(time.Duration(s) * time.Second) }
	rvAt := func(s int) uint64 { return uint64(10_000 + 100*s) }
	poll := func(s int) { hist.Observe(rvAt(s), at(s).Add(-100*time.Millisecond)) }
	cluster := func() (float64, bool) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "watchcache_cluster_writes_total" {
				return mf.GetMetric()[0].GetCounter().GetValue(), true
			}
		}
		return math.NaN(), false
	}

	for s := 0; s <= 5; s++ {
		poll(s)
		r.tick(at(s))
	}
	if got := r.Rate(); math.Abs(got-100) > 1e-6 {
		t.Fatalf("steady rate = %v, want 100", got)
	}
	if got, ok := cluster(); !ok || got != float64(rvAt(5)) {
		t.Fatalf("cluster counter %v (exported %v), want the newest RV, %d", got, ok, rvAt(5))
	}
	for s := 6; s < 36; s++ { // polls fail
		r.tick(at(s))
		got, ok := cluster()
		if s-5 < silentIntervals { // the last reading was 0.1 s before the tick at 5 s
			if !ok || got != float64(rvAt(5)) {
				t.Fatalf("at %d s (%d s of silence): cluster counter %v (exported %v), want the last RV, %d", s, s-5, got, ok, rvAt(5))
			}
		} else if ok {
			t.Fatalf("at %d s (%d s of silence): cluster counter %v still exported", s, s-5, got)
		}
		if got := r.Rate(); math.Abs(got-100) > 1e-6 {
			t.Fatalf("at %d s: the model's rate = %v during the gap, want the last known 100", s, got)
		}
	}
	poll(36)
	r.tick(at(36))
	got, ok := cluster()
	if !ok || got != float64(rvAt(36)) || math.Abs(r.Rate()-100) > 1e-6 {
		t.Fatalf("after the gap: cluster counter %v (exported %v), Rate %v; want %d and 100 (3100 RVs over 31 s), not the jump in one interval", got, ok, r.Rate(), rvAt(36))
	}

	// A quiet cluster: the same RV read again is a rate of 0, not silence.
	hist.Observe(rvAt(36), at(37))
	r.tick(at(37).Add(time.Millisecond))
	if got, ok := cluster(); !ok || got != float64(rvAt(36)) || r.Rate() != 0 {
		t.Fatalf("quiet cluster: cluster counter %v (exported %v), Rate %v; want %d, 0", got, ok, r.Rate(), rvAt(36))
	}
}

// The exporter's own writes are a counter of them, whatever the interval.
func TestRatesOwnWrites(t *testing.T) {
	hist := NewHistory(16)
	reg := prometheus.NewRegistry()
	NewRates(hist, false, time.Second, reg)
	now := time.Now()
	for i := range 7 {
		hist.ObserveWrite(uint64(100+i), now)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != "watchcache_exporter_writes_total" || mfs[0].GetMetric()[0].GetCounter().GetValue() != 7 {
		t.Errorf("families %v, want only watchcache_exporter_writes_total at 7 (no cluster counter before an RV is read)", mfs)
	}
}

// Times are kept on the monotonic clock, so a step of the wall clock moves
// no window: what TimeOf returns carries the monotonic reading.
func TestClockMonotonic(t *testing.T) {
	c := NewClock(16, 0)
	now := time.Now()
	c.Observe(100, now)
	c.Observe(200, now.Add(10*time.Second))
	got, ok := c.TimeOf(150)
	if !ok {
		t.Fatal("TimeOf(150) unknown")
	}
	if !strings.Contains(got.String(), " m=") {
		t.Fatalf("TimeOf(150) = %v: no monotonic reading, so a wall-clock step would move it", got)
	}
	if d := got.Sub(now); d != 5*time.Second {
		t.Fatalf("TimeOf(150) - t(100) = %v, want 5s", d)
	}
}
