package collector

import (
	"sync"
	"time"
)

// RVClock maps resourceVersions to the times they were written. It learns
// from RVs the exporter sees come into being (its own patches, BOOKMARKs,
// fresh list RVs) and answers, by interpolation, when an older RV was
// written. RVs are etcd revisions: one counter for every write in the
// cluster, so interpolating between two known points is exact where the
// exporter is the only writer and close where writes are steady.
//
// Memory is bounded: a ring of at most capacity samples, kept at least
// resolution apart (the newest sample always moves to the newest RV).
type RVClock struct {
	mu         sync.Mutex
	ring       []rvSample
	start, n   int
	resolution int64
}

type rvSample struct {
	rv uint64
	ns int64 // unix nanoseconds
}

// NewRVClock keeps up to capacity samples, about resolution apart: it
// remembers about capacity × resolution of history at any write rate, and
// more where writes are sparser.
func NewRVClock(capacity int, resolution time.Duration) *RVClock {
	return &RVClock{ring: make([]rvSample, max(capacity, 2)), resolution: int64(resolution)}
}

func (c *RVClock) at(i int) *rvSample { return &c.ring[(c.start+i)%len(c.ring)] }

// Observe records that rv existed at t. RVs not newer than the newest known
// are ignored: they bring no news, and responses of concurrent writes arrive
// a little out of order.
func (c *RVClock) Observe(rv uint64, t time.Time) {
	ns := t.UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n > 0 {
		last := c.at(c.n - 1)
		if rv <= last.rv {
			return
		}
		ns = max(ns, last.ns) // RVs grow with time; keep the map monotonic
		if c.n >= 2 && ns-c.at(c.n-2).ns < c.resolution {
			*last = rvSample{rv, ns}
			return
		}
	}
	if c.n == len(c.ring) {
		c.start = (c.start + 1) % len(c.ring)
		c.n--
	}
	*c.at(c.n) = rvSample{rv, ns}
	c.n++
}

// TimeOf returns when rv was written, interpolated between the nearest known
// RVs. ok is false when rv is older than the oldest or newer than the newest
// known RV.
func (c *RVClock) TimeOf(rv uint64) (t time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 || rv < c.at(0).rv || rv > c.at(c.n-1).rv {
		return time.Time{}, false
	}
	// Smallest i with ring[i].rv >= rv.
	lo, hi := 0, c.n-1
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if c.at(mid).rv < rv {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	b := c.at(lo)
	if b.rv == rv {
		return time.Unix(0, b.ns), true
	}
	a := c.at(lo - 1)
	frac := float64(rv-a.rv) / float64(b.rv-a.rv)
	return time.Unix(0, a.ns+int64(frac*float64(b.ns-a.ns))), true
}

// Newest returns the newest known RV and when it was seen.
func (c *RVClock) Newest() (rv uint64, t time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 {
		return 0, time.Time{}, false
	}
	s := c.at(c.n - 1)
	return s.rv, time.Unix(0, s.ns), true
}

// Len is the number of samples held.
func (c *RVClock) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}
