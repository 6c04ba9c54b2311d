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
