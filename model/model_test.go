package model

import (
	"math"
	"testing"
	"time"
)

// The table of docs/how-it-works.md ("The apiserver's sizing rules"),
// measured against kube-apiserver v1.37.2.
func TestSteadyStateTable(t *testing.T) {
	for _, tc := range []struct {
		rate     float64
		capacity int
		window   float64
	}{
		{1, 100, 100}, {10, 800, 80}, {40, 3200, 80}, {50, 6400, 128}, {85, 6400, 75.3},
		{86, 12800, 148.8}, {100, 12800, 128}, {160, 12800, 80}, {400, 51200, 128},
		{1365, 102400, 75}, {2000, 102400, 51.2}, {5000, 102400, 20.5},
	} {
		c, w := SteadyState(tc.rate, DefaultWindow)
		if c != tc.capacity || math.Abs(w-tc.window) > 0.05 {
			t.Errorf("SteadyState(%v) = %d, %.2f s; want %d, %.1f s", tc.rate, c, w, tc.capacity, tc.window)
		}
	}
}

// Simulating a long constant rate from an empty cache ends where the
// formula says, for every rate of the table and some between.
func TestSimulationReachesSteadyState(t *testing.T) {
	for _, r := range []float64{1, 10, 40, 50, 85, 86, 100, 160, 400, 1000, 2000} {
		c := NewCache(DefaultWindow)
		end := 1000.0
		c.AddRate(0, end, r)
		wantCap, wantWin := SteadyState(r, DefaultWindow)
		win, ok := c.Window(end)
		if c.Capacity() != wantCap || !ok || math.Abs(win-wantWin) > 1/r+1e-9 {
			t.Errorf("rate %v: simulated capacity %d window %.2f s (%v); formula %d, %.2f s", r, c.Capacity(), win, ok, wantCap, wantWin)
		}
	}
}

// After the rate falls, the cache keeps its size until the event a quarter
// back is older than the window: the window grows (hysteresis).
func TestHysteresis(t *testing.T) {
	c := NewCache(DefaultWindow)
	c.AddRate(0, 600, 40)
	rising, _ := c.Window(600)
	c.AddRate(600, 1200, 100)
	if got := c.Capacity(); got != 12800 {
		t.Fatalf("capacity at 100 writes/s = %d, want 12800", got)
	}
	c.AddRate(1200, 1800, 40)
	falling, _ := c.Window(1800)
	// 12800 at 40/s: a quarter back is 80 s > 75 s: halve to 6400, whose
	// quarter (40 s) is recent: the window settles at 6400/40 = 160 s.
	if c.Capacity() != 6400 || math.Abs(falling-160) > 0.1 {
		t.Errorf("after the fall: capacity %d, window %.2f s; want 6400, 160 s", c.Capacity(), falling)
	}
	if math.Abs(rising-80) > 0.1 {
		t.Errorf("rising step window %.2f s, want 80 s", rising)
	}
}

func TestLongerHistoryWindow(t *testing.T) {
	// --request-timeout=2m: window 135 s, capacity cap 204800.
	w := 135 * time.Second
	if got := UpperBoundFor(w); got != 204800 {
		t.Errorf("UpperBoundFor(135s) = %d, want 204800", got)
	}
	c := NewCache(w)
	c.AddRate(0, 2000, 40)
	win, _ := c.Window(2000)
	if c.Capacity() != 6400 || math.Abs(win-160) > 0.1 {
		t.Errorf("135 s window at 40 writes/s: capacity %d window %.2f s, want 6400, 160 s", c.Capacity(), win)
	}
}

func TestAddRateCountsEvents(t *testing.T) {
	c := NewCache(DefaultWindow)
	// 0.3 writes/s in 1 s steps: 3 events in 10 s, carried fractions kept.
	for s := 0; s < 10; s++ {
		c.AddRate(float64(s), float64(s+1), 0.3)
	}
	if c.Len() != 3 {
		t.Errorf("%d events after 10 s at 0.3/s, want 3", c.Len())
	}
}

func BenchmarkAddRate(b *testing.B) {
	c := NewCache(DefaultWindow)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.AddRate(float64(i), float64(i+1), 100)
	}
}
