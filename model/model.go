// Package model simulates the sizing of the kube-apiserver watch cache's
// history (k8s.io/apiserver/pkg/storage/cacher, watchCacheHistory), to
// predict the history window at a given write rate, including the hysteresis
// after the rate falls.
package model

import (
	"math"
	"sort"
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
//
// The events are kept as runs of evenly spaced times (one per AddRate), not
// one by one: a 1h history window lets the buffer reach 6.5 million events,
// 52 MiB per apiserver as float64s, where its runs take a few hundred KiB.
type Cache struct {
	window     float64
	upper      int
	capacity   int
	runs       []run   // oldest first; runs[0] holds the event at start
	start, end int     // as watchCacheHistory's startIndex and endIndex
	removed    bool    // an event has been dropped
	carry      float64 // fraction of an event left from AddRate
	pushed     int     // events AddRate simulated one by one: its work
}

// run is n events, the i-th (from 0) at t0 + i*step, the first of them the
// cache's event number first.
type run struct {
	first    int
	n        int
	t0, step float64
}

// NewCache is an empty cache with the given history window.
func NewCache(window time.Duration) *Cache {
	return &Cache{window: window.Seconds(), upper: UpperBoundFor(window), capacity: LowerBound}
}

// Capacity is the ring buffer's current size.
func (c *Cache) Capacity() int { return c.capacity }

// Len is the number of events held.
func (c *Cache) Len() int { return c.end - c.start }

func (c *Cache) full() bool { return c.end == c.start+c.capacity }

// at is the time of event i, start <= i < end.
func (c *Cache) at(i int) float64 {
	k := sort.Search(len(c.runs), func(k int) bool { return c.runs[k].first+c.runs[k].n > i })
	r := &c.runs[k]
	return r.t0 + float64(i-r.first)*r.step
}

// Add records one event at time t (seconds; never less than the last one).
func (c *Cache) Add(t float64) {
	c.runs = append(c.runs, run{first: c.end, t0: t})
	c.push(t)
}

// push records the event that the last run was just given (or extended to
// hold) at time t.
func (c *Cache) push(t float64) {
	c.resize(t)
	if c.full() {
		c.start++
		c.removed = true
	}
	c.runs[len(c.runs)-1].n++
	c.end++
	for len(c.runs) > 1 && c.runs[0].first+c.runs[0].n <= c.start {
		c.runs = c.runs[1:]
	}
}

func (c *Cache) resize(t float64) {
	n := c.capacity
	if !c.full() {
		return
	}
	if t-c.at(c.start) < c.window {
		c.capacity = min(2*n, c.upper)
		return
	}
	if t-c.at(c.end-n/4) > c.window {
		if shrunk := max(n/2, LowerBound); shrunk < n {
			c.capacity = shrunk
			c.start = c.end - shrunk
		}
	}
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
	if k == 0 {
		return
	}
	// The k events fall at the end of the interval's whole steps.
	t0 := to - float64(k-1)*step - c.carry*step
	first := c.end
	c.runs = append(c.runs, run{first: first, t0: t0, step: step})
	for j := range k {
		n, settled := c.capacity, c.start >= first && c.full()
		c.push(t0 + float64(j)*step)
		c.pushed++
		if settled && c.capacity == n {
			// The buffer was full of this run's evenly spaced events alone
			// and did not resize: its oldest is always capacity steps back,
			// so it never will in this run. The rest only shifts it (a
			// jump of a billion revisions would otherwise take 20 s).
			rest := k - 1 - j
			c.start += rest
			c.end += rest
			c.runs[len(c.runs)-1].n += rest
			c.removed = c.removed || rest > 0
			for len(c.runs) > 1 && c.runs[0].first+c.runs[0].n <= c.start {
				c.runs = c.runs[1:]
			}
			return
		}
	}
}

// Window is now minus the time of the oldest event held: how long ago the
// oldest resourceVersion still served was written. ok is false until the
// cache has dropped an event (until then it only says how old the cache is).
func (c *Cache) Window(now float64) (seconds float64, ok bool) {
	if !c.removed || c.Len() == 0 {
		return math.NaN(), false
	}
	return now - c.at(c.start), true
}
