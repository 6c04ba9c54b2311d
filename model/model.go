// Package model simulates the sizing of the kube-apiserver watch cache's
// history (k8s.io/apiserver/pkg/storage/cacher, watchCacheHistory), to
// predict the history window at a given write rate, including the hysteresis
// after the rate falls.
package model

import (
	"math"
	"time"
)

const (
	// LowerBound is the ring buffer's first and smallest capacity.
	LowerBound = 100
	// UpperBound is its largest capacity with the default history window.
	UpperBound = 100 * 1024
	// DefaultWindow is the default history window (EventsHistoryWindow):
	// 60 s of bookmark period + 15 s. The apiserver raises it to
	// --request-timeout + 15 s when that is larger.
	DefaultWindow = 75 * time.Second
)

// UpperBoundFor is the capacity cap for a history window: 102400, doubled
// for each doubling of the window beyond the default, rounded up.
func UpperBoundFor(window time.Duration) int {
	if window <= DefaultWindow {
		return UpperBound
	}
	exp := int(math.Ceil(math.Log2(window.Seconds() / DefaultWindow.Seconds())))
	if maxExp := int(math.Floor(math.Log2(math.MaxInt32 / UpperBound))); exp > maxExp {
		exp = maxExp
	}
	return UpperBound << exp
}

// SteadyState is the capacity and window after a long time at a constant
// rate r (writes/s) that started from a small cache: the smallest 100·2^k
// that holds window × r events, and that capacity's span in seconds.
func SteadyState(r float64, window time.Duration) (capacity int, seconds float64) {
	capacity = LowerBound
	for capacity < UpperBoundFor(window) && float64(capacity) < window.Seconds()*r {
		capacity *= 2
	}
	return capacity, float64(capacity) / r
}

// Cache is the ring buffer of event times, sized as the apiserver sizes its
// own: it doubles when full while its oldest event is younger than the
// window, and halves when full while the event a quarter of the buffer back
// is older than the window.
type Cache struct {
	window     float64
	upper      int
	ring       []float64 // event times in seconds
	start, end int       // as watchCacheHistory's startIndex and endIndex
	removed    bool      // an event has been dropped
	carry      float64   // fraction of an event left from AddRate
}

// NewCache is an empty cache with the given history window.
func NewCache(window time.Duration) *Cache {
	return &Cache{window: window.Seconds(), upper: UpperBoundFor(window), ring: make([]float64, LowerBound)}
}

// Capacity is the ring buffer's current size.
func (c *Cache) Capacity() int { return len(c.ring) }

// Len is the number of events held.
func (c *Cache) Len() int { return c.end - c.start }

func (c *Cache) full() bool { return c.end == c.start+len(c.ring) }

// Add records one event at time t (seconds; never less than the last one).
func (c *Cache) Add(t float64) {
	c.resize(t)
	if c.full() {
		c.start++
		c.removed = true
	}
	c.ring[c.end%len(c.ring)] = t
	c.end++
}

func (c *Cache) resize(t float64) {
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

func (c *Cache) realloc(capacity int) {
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
func (c *Cache) AddRate(from, to, r float64) {
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

// Window is now minus the time of the oldest event held: how long ago the
// oldest resourceVersion still served was written. ok is false until the
// cache has dropped an event (until then it only says how old the cache is).
func (c *Cache) Window(now float64) (seconds float64, ok bool) {
	if !c.removed || c.Len() == 0 {
		return math.NaN(), false
	}
	return now - c.ring[c.start%len(c.ring)], true
}
