package model

import (
	"math"
	"testing"
	"time"
)

// The cache kept as runs sizes itself exactly as one kept event by event
// (ringCache, the apiserver's own layout): the same capacity and window after
// every step, through growth to the cap, hysteresis and shrinking.
func TestRunsMatchRing(t *testing.T) {
	for _, w := range []time.Duration{DefaultWindow, 10 * time.Minute} {
		c, ref := NewCache(w), newRingCache(w)
		now := 0.0
		for _, phase := range []struct{ rate, secs, step float64 }{
			{40, 600, 1}, {0.3, 100, 1}, {400, 900, 0.5}, {2000, 300, 5}, {5, 3000, 10}, {90, 400, 1},
			// A jump of the revisions (an etcd restore that bumps them).
			{300000, 2, 1}, {40, 300, 1},
		} {
			for end := now + phase.secs; now < end; now += phase.step {
				c.AddRate(now, now+phase.step, phase.rate)
				ref.AddRate(now, now+phase.step, phase.rate)
				got, _ := c.Window(now + phase.step)
				if c.Capacity() != len(ref.ring) || c.Len() != ref.end-ref.start ||
					c.Len() > 0 && math.Abs(got-(now+phase.step-ref.oldest())) > 1e-6 {
					t.Fatalf("window %v, %v/s at %.1f s: capacity %d len %d window %.6f; event by event %d, %d, %.6f",
						w, phase.rate, now, c.Capacity(), c.Len(), got, len(ref.ring), ref.end-ref.start, now+phase.step-ref.oldest())
				}
			}
		}
	}
}

// A jump of a billion revisions in one step (an etcd restore with
// --bump-revision): the work is bounded by the cache's cap, not the jump, and
// the cache ends full of the jump's newest events.
func TestRevisionJumpBoundsWork(t *testing.T) {
	c := NewCache(DefaultWindow)
	c.AddRate(0, 100, 40)
	before := c.pushed
	c.AddRate(100, 101, 1e9)
	if work := c.pushed - before; work > 3*UpperBound {
		t.Errorf("%d events simulated one by one for a jump of 1e9, want at most 3 × the cap %d", work, UpperBound)
	}
	if c.Capacity() != UpperBound || c.Len() != UpperBound {
		t.Errorf("capacity %d holding %d after the jump, want the cap %d, full", c.Capacity(), c.Len(), UpperBound)
	}
	if got, _ := c.Window(101); math.Abs(got-UpperBound/1e9) > 1e-8 {
		t.Errorf("window %.9f s after the jump, want %d events at 1e9/s: %.9f s", got, UpperBound, UpperBound/1e9)
	}
}

// A 1h history window at 2000 writes/s fills the cache's cap (6553600
// events, 52 MiB as float64s): it keeps one run per AddRate instead.
func TestRunsBoundMemory(t *testing.T) {
	c := NewCache(time.Hour)
	for s := 0; s < 4000; s += 10 {
		c.AddRate(float64(s), float64(s+10), 2000)
	}
	if c.Capacity() != UpperBoundFor(time.Hour) || c.Len() != c.Capacity() {
		t.Fatalf("capacity %d holding %d, want the cap %d, full", c.Capacity(), c.Len(), UpperBoundFor(time.Hour))
	}
	if n := len(c.runs); n > 330 {
		t.Errorf("%d runs for %d events, want one per 10 s step held (at most 330)", n, c.Len())
	}
	if got, _ := c.Window(4000); math.Abs(got-3276.8) > 0.01 {
		t.Errorf("window %.2f s, want 6553600 / 2000 = 3276.8 s", got)
	}
}

// ringCache is the cache kept event by event in a ring, as the apiserver
// keeps its own: the reference for TestRunsMatchRing.
type ringCache struct {
	window     float64
	upper      int
	ring       []float64 // event times in seconds
	start, end int       // as watchCacheHistory's startIndex and endIndex
	removed    bool      // an event has been dropped
	carry      float64   // fraction of an event left from AddRate
}

// NewCache is an empty cache with the given history window.
func newRingCache(window time.Duration) *ringCache {
	return &ringCache{window: window.Seconds(), upper: UpperBoundFor(window), ring: make([]float64, LowerBound)}
}

// Capacity is the ring buffer's current size.
func (c *ringCache) Capacity() int { return len(c.ring) }

// Len is the number of events held.
func (c *ringCache) Len() int { return c.end - c.start }

func (c *ringCache) full() bool { return c.end == c.start+len(c.ring) }

// Add records one event at time t (seconds; never less than the last one).
func (c *ringCache) Add(t float64) {
	c.resize(t)
	if c.full() {
		c.start++
		c.removed = true
	}
	c.ring[c.end%len(c.ring)] = t
	c.end++
}

func (c *ringCache) resize(t float64) {
	n := len(c.ring)
	if !c.full() {
		return
	}
	if t-c.ring[c.start%n] < c.window {
		if grown := min(2*n, c.upper); grown > n {
			c.realloc(grown)
		}
		return
	}
	if t-c.ring[(c.end-n/4)%n] > c.window {
		if shrunk := max(n/2, LowerBound); shrunk < n {
			c.realloc(shrunk)
		}
	}
}

func (c *ringCache) realloc(capacity int) {
	ring := make([]float64, capacity)
	if capacity < len(c.ring) {
		c.start = c.end - capacity
	}
	for i := c.start; i < c.end; i++ {
		ring[i%capacity] = c.ring[i%len(c.ring)]
	}
	c.ring = ring
}

// AddRate records events at rate r (writes/s) spread evenly over (from, to].
func (c *ringCache) AddRate(from, to, r float64) {
	if r <= 0 || to <= from {
		return
	}
	step := 1 / r
	n := c.carry + (to-from)*r
	k := int(n + 1e-9) // 0.3 ten times is 2.9999999...
	c.carry = max(n-float64(k), 0)
	// The k events fall at the end of the interval's whole steps.
	for i := k; i >= 1; i-- {
		c.Add(to - float64(i-1)*step - c.carry*step)
	}
}

func (c *ringCache) oldest() float64 { return c.ring[c.start%len(c.ring)] }
