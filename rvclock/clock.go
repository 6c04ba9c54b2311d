// Package rvclock is the exporter's process-wide knowledge of
// resourceVersions: when each was written (the RV clock), which were the
// exporter's own ConfigMap writes, and the write rates they give. Every
// apiserver's measurement shares it: RVs are etcd revisions, one counter per
// etcd (History keeps a clock for each).
package rvclock

import (
	"sync"
	"time"
)

// Clock maps resourceVersions to the times they were written. It learns
// from RVs the exporter sees come into being (its own patches, BOOKMARKs,
// fresh list RVs) and answers, by interpolation, when an older RV was
// written: exact where the exporter is the only writer, close where writes
// are steady.
//
// Memory is bounded: a ring of at most capacity samples, kept at least
// resolution apart (the newest sample always moves to the newest RV).
//
// Times are kept as offsets from the clock's creation, read from Go's
// monotonic clock, so a step of the wall clock (NTP) moves no window.
type Clock struct {
	mu         sync.Mutex
	base       time.Time
	ring       *ring[sample]
	resolution int64
	heard      int64 // when the newest RV was last seen still newest
}

type sample struct {
	rv uint64
	ns int64 // since base
}

// NewClock keeps up to capacity samples, about resolution apart: it
// remembers about capacity × resolution of history at any write rate, and
// more where writes are sparser.
func NewClock(capacity int, resolution time.Duration) *Clock {
	return &Clock{base: time.Now(), ring: newRing[sample](max(capacity, 2)), resolution: int64(resolution)}
}

// Observe records that rv existed at t. RVs not newer than the newest known
// are ignored: they bring no news, and responses of concurrent writes arrive
// a little out of order.
func (c *Clock) Observe(rv uint64, t time.Time) {
	ns := int64(t.Sub(c.base))
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.ring.Len(); n > 0 {
		last := c.ring.At(n - 1)
		if rv == last.rv {
			c.heard = max(c.heard, ns)
		}
		if rv <= last.rv {
			return
		}
		ns = max(ns, last.ns) // RVs grow with time; keep the map monotonic
		if n >= 2 && ns-c.ring.At(n-2).ns < c.resolution {
			*last = sample{rv, ns}
			c.heard = ns
			return
		}
	}
	c.heard = ns
	c.ring.Push(sample{rv, ns})
}

// TimeOf returns when rv was written, interpolated between the nearest known
// RVs. ok is false when rv is older than the oldest or newer than the newest
// known RV.
func (c *Clock) TimeOf(rv uint64) (t time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.ring.Len()
	if n == 0 || rv < c.ring.At(0).rv || rv > c.ring.At(n-1).rv {
		return time.Time{}, false
	}
	i := c.ring.Search(func(s *sample) bool { return s.rv >= rv })
	b := c.ring.At(i)
	if b.rv == rv {
		return c.base.Add(time.Duration(b.ns)), true
	}
	a := c.ring.At(i - 1)
	frac := float64(rv-a.rv) / float64(b.rv-a.rv)
	return c.base.Add(time.Duration(a.ns + int64(frac*float64(b.ns-a.ns)))), true
}

// Oldest returns the oldest RV the clock still knows the time of.
func (c *Clock) Oldest() (rv uint64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ring.Len() == 0 {
		return 0, false
	}
	return c.ring.At(0).rv, true
}

// Newest returns the newest known RV and the last time it was seen still
// the newest (a later read that returned it again): between two such
// readings the RVs advanced by their difference, whatever came between.
func (c *Clock) Newest() (rv uint64, heard time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.ring.Len()
	if n == 0 {
		return 0, time.Time{}, false
	}
	return c.ring.At(n - 1).rv, c.base.Add(time.Duration(c.heard)), true
}

// Len is the number of samples held.
func (c *Clock) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ring.Len()
}

// Age is how long ago rv was written, at at. Where rv is older than
// anything the clock remembers, it is at least the age of the oldest RV it
// does: lower is then true. ok is false when the clock knows nothing older
// than rv's successor.
func (c *Clock) Age(rv uint64, at time.Time) (seconds float64, lower, ok bool) {
	if written, ok := c.TimeOf(rv); ok {
		return at.Sub(written).Seconds(), false, true
	}
	if oldest, ok := c.Oldest(); ok && rv < oldest {
		if written, ok := c.TimeOf(oldest); ok {
			return at.Sub(written).Seconds(), true, true
		}
	}
	return 0, false, false
}
