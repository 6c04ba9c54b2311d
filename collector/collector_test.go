package collector

import (
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/watchcache/watchcache-exporter/rvclock"
	"github.com/watchcache/watchcache-exporter/test/typed"
)

func BenchmarkRecordProbe(b *testing.B) {
	c, err := New(Config{Namespace: "ns", QuietName: "q", ProbeInterval: time.Second}, typed.Core(fake.NewClientset().CoreV1()), nil, rvclock.NewHistory(16), func() float64 { return 0 }, prometheus.NewRegistry(), logr.Discard())
	if err != nil {
		b.Fatal(err)
	}
	r := ProbeResult{Outcome: Expired, Refusal: Refusal{Source: SourceWatchCache, Requested: 1, Oldest: 2}, At: time.Now()}
	b.ReportAllocs()
	for b.Loop() {
		c.record(FromStale, r)
	}
}

// TestLabels: two apiservers' Collectors on one registry, each series with
// its own apiserver label (the window table's through its descriptors, the
// rest wrapped), and nothing left of one after its Unregister.
func TestLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	var cs []*Collector
	for _, a := range []string{"a", "b"} {
		c, err := New(Config{Namespace: "ns", QuietName: "q", ProbeInterval: time.Second, Labels: prometheus.Labels{"apiserver": a}},
			typed.Core(fake.NewClientset().CoreV1()), nil, rvclock.NewHistory(16), func() float64 { return 0 }, reg, logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	count := func() map[string]int {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		by := map[string]int{}
		for _, f := range fams {
			for _, m := range f.GetMetric() {
				a := ""
				for _, l := range m.GetLabel() {
					if l.GetName() == "apiserver" {
						a = l.GetValue()
					}
				}
				by[a]++
				if f.GetName() == "watchcache_window_seconds" && a == "" {
					t.Errorf("window series without an apiserver label: %v", m)
				}
			}
		}
		return by
	}
	by := count()
	if by[""] != 0 || by["a"] == 0 || by["a"] != by["b"] {
		t.Errorf("series by apiserver label: %v", by)
	}
	cs[0].Unregister()
	if by := count(); by["a"] != 0 || by["b"] == 0 {
		t.Errorf("after a's Unregister: %v", by)
	}
}
