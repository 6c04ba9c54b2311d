package collector

import (
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
)

func BenchmarkRecordProbe(b *testing.B) {
	c, err := New(Config{Namespace: "ns", QuietName: "q", ProbeInterval: time.Second}, nil, NewHistory(16), prometheus.NewRegistry(), logr.Discard(), time.Now)
	if err != nil {
		b.Fatal(err)
	}
	r := ProbeResult{Outcome: Expired, Refusal: Refusal{Source: SourceWatchCache, Requested: 1, Oldest: 2}, At: time.Now()}
	b.ReportAllocs()
	for b.Loop() {
		c.record(FromStale, r)
	}
}
