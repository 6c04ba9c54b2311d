package rvclock

import (
	"testing"
	"time"
)

var t0 = time.Unix(1_800_000_000, 0)

func TestClock(t *testing.T) {
	c := NewClock(100, 0)
	if _, ok := c.TimeOf(1); ok {
		t.Fatal("empty clock knows a time")
	}
	// 10 writes/s: RV 100 at t0, 110 at t0+1s, ...
	for i := 0; i <= 10; i++ {
		c.Observe(uint64(100+10*i), t0.Add(time.Duration(i)*time.Second))
	}
	c.Observe(105, t0.Add(20*time.Second)) // late, out-of-order response: ignored
	for _, tc := range []struct {
		rv   uint64
		want time.Duration
		ok   bool
	}{
		{100, 0, true},
		{105, 500 * time.Millisecond, true},
		{110, time.Second, true},
		{149, 4900 * time.Millisecond, true},
		{200, 10 * time.Second, true},
		{99, 0, false},
		{201, 0, false},
	} {
		got, ok := c.TimeOf(tc.rv)
		if ok != tc.ok || (ok && !got.Equal(t0.Add(tc.want))) {
			t.Errorf("TimeOf(%d) = t0%+v, %v; want t0+%v, %v", tc.rv, got.Sub(t0), ok, tc.want, tc.ok)
		}
	}
	if rv, at, _ := c.Newest(); rv != 200 || !at.Equal(t0.Add(10*time.Second)) {
		t.Errorf("Newest() = %d at t0+%v, want 200 at t0+10s", rv, at.Sub(t0))
	}
}

func TestClockBounded(t *testing.T) {
	const capacity = 64
	c := NewClock(capacity, 10*time.Millisecond)
	// 1000 writes/s for 10 s: 10000 RVs, one sample per 10 ms at most.
	for i := 0; i < 10000; i++ {
		c.Observe(uint64(i+1), t0.Add(time.Duration(i)*time.Millisecond))
	}
	if n := c.Len(); n != capacity {
		t.Fatalf("Len() = %d, want the capacity %d", n, capacity)
	}
	// The ring keeps about capacity × resolution: RV 10000 back to ~9430.
	if _, ok := c.TimeOf(9000); ok {
		t.Error("TimeOf(9000) known after it left the ring")
	}
	for _, rv := range []uint64{9450, 9555, 9999, 10000} {
		got, ok := c.TimeOf(rv)
		want := t0.Add(time.Duration(rv-1) * time.Millisecond)
		if !ok || got.Sub(want).Abs() > 0 {
			t.Errorf("TimeOf(%d) = t0+%v, %v; want t0+%v", rv, got.Sub(t0), ok, want.Sub(t0))
		}
	}
}

func TestClockNonMonotonicTime(t *testing.T) {
	c := NewClock(10, 0)
	c.Observe(10, t0.Add(time.Second))
	c.Observe(20, t0) // a newer RV reported with an earlier time
	if got, _ := c.TimeOf(20); got.Before(t0.Add(time.Second)) {
		t.Errorf("TimeOf(20) = t0+%v, before the time of RV 10", got.Sub(t0))
	}
}

func BenchmarkClockObserve(b *testing.B) {
	c := NewClock(1<<16, 10*time.Millisecond)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.Observe(uint64(i+1), t0.Add(time.Duration(i)*time.Millisecond))
	}
}

func BenchmarkClockTimeOf(b *testing.B) {
	c := NewClock(1<<16, 0)
	for i := 0; i < 1<<16; i++ {
		c.Observe(uint64(2*i+1), t0.Add(time.Duration(i)*time.Millisecond))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.TimeOf(uint64(i % (1 << 17)))
	}
}
