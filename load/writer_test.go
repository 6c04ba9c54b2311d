package load_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/watchcache/watchcache-exporter/internal/owned"
	"github.com/watchcache/watchcache-exporter/load"
	"github.com/watchcache/watchcache-exporter/rvclock"
	"github.com/watchcache/watchcache-exporter/test/fakecache"
	"github.com/watchcache/watchcache-exporter/test/typed"
)

func runWriter(t *testing.T, srv *fakecache.Server, rate float64, d time.Duration) *prometheus.Registry {
	t.Helper()
	return runWriterWith(t, srv, 1, rate, d, nil)
}

// runWriterWith runs a writer over objects noise objects for d; during,
// when set, runs beside it.
func runWriterWith(t *testing.T, srv *fakecache.Server, objects int, rate float64, d time.Duration, during func(*prometheus.Registry)) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	store := owned.NewStore("ns", "quiet", reg, logr.Discard(), time.Now)
	w, err := load.NewWriter(load.Config{Namespace: "ns", Prefix: "noise-", Objects: objects, Schedule: load.Constant(rate), MaxRate: 100},
		typed.Core(srv.CoreV1()), store, rvclock.NewHistory(100), reg, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { w.Run(ctx) })
	if during != nil {
		during(reg)
	}
	time.Sleep(d)
	cancel()
	wg.Wait()
	return reg
}

// A noise object whose marks somebody removed is not written again, and the
// load goes on over the others; once they delete it, the writer creates it
// again (within the 30 s recheck) and writes it.
func TestWriterLeavesObjectsNotOwned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := fakecache.New(100)
		var taken *corev1.ConfigMap
		reg := runWriterWith(t, srv, 2, 10, 0, func(reg *prometheus.Registry) {
			time.Sleep(2 * time.Second)
			cm := srv.Get("noise-1")
			delete(cm.Labels, owned.ManagedByLabel)
			cm.Data = map[string]string{"theirs": "1"}
			srv.Put(cm)
			taken = srv.Get("noise-1")
			time.Sleep(10 * time.Second)
			if got := srv.Get("noise-1"); got.ResourceVersion != taken.ResourceVersion {
				t.Errorf("the taken object was written: RV %s -> %s, data %v", taken.ResourceVersion, got.ResourceVersion, got.Data)
			}
			if got := gauge(t, reg, "watchcache_exporter_objects_lost"); got != 1 {
				t.Errorf("watchcache_exporter_objects_lost = %v, want 1", got)
			}
			srv.Delete("noise-1")
			time.Sleep(31 * time.Second)
			if got := srv.Get("noise-1"); got == nil || got.Data["seq"] == "0" {
				t.Errorf("noise-1 not recreated and written after its deletion: %v", got)
			}
		})
		if got := gauge(t, reg, "watchcache_exporter_objects_lost"); got != 0 {
			t.Errorf("watchcache_exporter_objects_lost = %v after the recreation, want 0", got)
		}
		// One refused patch finds the lost marks; after it the object is skipped.
		if got := writes(t, reg, "error"); got != 1 {
			t.Errorf("%v failed patches, want 1", got)
		}
	})
}

// A 429 with Retry-After 3 s holds the worker for 3 s, not the default
// second: at 1 write/s for 10.5 s, patches at 0, 3, 6 and 9 s.
func TestWriterHonoursRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := fakecache.New(100)
		srv.PatchErr = func(string) error { return apierrors.NewTooManyRequests("slow down", 3) }
		reg := runWriter(t, srv, 1, 10500*time.Millisecond)
		if got := writes(t, reg, "throttled"); got != 4 {
			t.Errorf("%v throttled patches in 10.5 s with Retry-After 3 s, want 4", got)
		}
	})
}

// A noise object deleted by somebody: the patch fails with NotFound once,
// the writer creates the object again, and the load goes on.
func TestWriterRecreatesDeletedNoise(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := fakecache.New(100)
		gone := true
		srv.PatchErr = func(name string) error {
			if gone {
				gone = false
				srv.Unlock() // Delete takes the lock
				srv.Delete(name)
				srv.Lock()
			}
			return nil
		}
		reg := runWriter(t, srv, 1, 5500*time.Millisecond)
		if !srv.Exists("noise-0") {
			t.Error("noise-0 not created again")
		}
		if got := writes(t, reg, "error"); got != 1 {
			t.Errorf("%v failed patches, want the 1 NotFound", got)
		}
		// 0 s NotFound, 1 s pause, then 1 write/s: 1.x, 2.x, ... 5.x.
		if got := writes(t, reg, "ok"); got < 4 {
			t.Errorf("%v patches after the recreation, want 4 or more", got)
		}
	})
}

// gauge is the value of an unlabelled gauge.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}

// writes is watchcache_load_writes_total{result}.
func writes(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == "watchcache_load_writes_total" && m.GetLabel()[0].GetValue() == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no watchcache_load_writes_total{result=%q}", result)
	return 0
}

// The target exists only while the load runs: a standby (the Lease lost)
// reports none, so a sum over the pods counts the load once.
func TestWriterTargetOnlyWhileRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		count := func(reg *prometheus.Registry) int {
			n, err := testutil.GatherAndCount(reg, "watchcache_load_target_writes_per_second")
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		reg := runWriterWith(t, fakecache.New(100), 1, 10, 2*time.Second, func(reg *prometheus.Registry) {
			time.Sleep(time.Second)
			if got := gauge(t, reg, "watchcache_load_target_writes_per_second"); got != 10 {
				t.Errorf("target %v while the load runs, want 10", got)
			}
		})
		if n := count(reg); n != 0 {
			t.Errorf("%d target series after the load stopped, want none", n)
		}
	})
}

// The writer keeps the rate asked for, fractions of a write per tick included.
func TestWriterRate(t *testing.T) {
	for _, rate := range []float64{100, 25, 0.5} {
		synctest.Test(t, func(t *testing.T) {
			srv := fakecache.New(100)
			reg := runWriter(t, srv, rate, 20*time.Second+time.Millisecond)
			want := rate * 20
			if got := writes(t, reg, "ok"); got < want-1 || got > want {
				t.Errorf("rate %v for 20 s: %v writes, want %v (one less at most)", rate, got, want)
			}
		})
	}
}

// Passive mode asks for no load: no target series, rather than 0.
func TestWriterPassiveHasNoTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := runWriterWith(t, fakecache.New(100), 1, 0, time.Second, func(*prometheus.Registry) {})
		if n, err := testutil.GatherAndCount(reg, "watchcache_load_target_writes_per_second"); err != nil || n != 0 {
			t.Errorf("%d target series in passive mode (%v), want none", n, err)
		}
	})
}
