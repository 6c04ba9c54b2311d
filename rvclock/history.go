package rvclock

import (
	"sync"
	"time"
)

// History is what the exporter knows about resourceVersions: when they were
// written (the Clock, learnt from every RV it sees come into being), and
// which were its own ConfigMap writes.
//
// RVs are the revisions of one etcd, so there is one clock per etcd: Clock
// is the ConfigMaps' (the main etcd, which holds every resource unless
// --etcd-servers-overrides moves it); a resource whose RVs were seen not to
// follow it (events in an etcd of their own) is timed by a clock of its own,
// learnt from its own RVs only.
type History struct {
	Clock *Clock

	mu     sync.Mutex
	own    *ring[uint64] // RVs of own writes, in order
	total  uint64
	others map[string]*Clock // by resource name: those in another etcd
	placed map[string]bool   // those seen in the main etcd
}

// NewHistory remembers about 11 minutes of RV clock (65536 samples at
// least 10 ms apart) and the last ownCapacity own writes.
func NewHistory(ownCapacity int) *History {
	return &History{Clock: NewClock(1<<16, 10*time.Millisecond), own: newRing[uint64](ownCapacity),
		others: map[string]*Clock{}, placed: map[string]bool{}}
}

// otherClockSamples bounds the clock of a resource in another etcd: it
// learns one RV per object count (--resources.interval), so 4096 samples
// (64 KiB) hold hours.
const otherClockSamples = 1 << 12

// Place records rv, read by a list of resource at t. sameEtcd says whether
// it lay between two reads of the main etcd's current RV (a list is a
// consistent read: one of a resource in the main etcd always does). Once an
// RV of it did not, the resource is another etcd's for good, and its RVs
// teach a clock of its own.
func (h *History) Place(resource string, rv uint64, t time.Time, sameEtcd bool) {
	h.mu.Lock()
	c, other := h.others[resource]
	switch {
	case other:
	case sameEtcd:
		h.placed[resource] = true
		c = h.Clock
	default:
		c = NewClock(otherClockSamples, 10*time.Millisecond)
		h.others[resource] = c
		delete(h.placed, resource)
	}
	h.mu.Unlock()
	c.Observe(rv, t)
}

// ClockOf is the clock that times resource's RVs: the main one, or its own
// once Place has seen that they are another etcd's. ok is false until Place
// has seen a list of it.
func (h *History) ClockOf(resource string) (c *Clock, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.others[resource]; ok {
		return c, true
	}
	return h.Clock, h.placed[resource]
}

// Other says whether resource's RVs were seen to be another etcd's.
func (h *History) Other(resource string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.others[resource]
	return ok
}

// Observe records an RV of the main etcd the exporter saw come into being
// at t (a BOOKMARK, a fresh list) that was not its own write.
func (h *History) Observe(rv uint64, t time.Time) { h.Clock.Observe(rv, t) }

// ObserveWrite records one of the exporter's own ConfigMap writes.
func (h *History) ObserveWrite(rv uint64, t time.Time) {
	h.Clock.Observe(rv, t)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.total++
	h.own.Push(rv)
	// Responses of concurrent writes arrive a little out of order: move the
	// new RV back into place past the few entries it overtook.
	for i := h.own.Len() - 1; i > 0 && *h.own.At(i - 1) > *h.own.At(i); i-- {
		*h.own.At(i - 1), *h.own.At(i) = *h.own.At(i), *h.own.At(i - 1)
	}
}

// OwnWritesAfter counts the remembered own writes with an RV above rv.
func (h *History) OwnWritesAfter(rv uint64) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.own.Len() - h.own.Search(func(v *uint64) bool { return *v > rv })
}

// OwnWrites is the number of own writes so far.
func (h *History) OwnWrites() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total
}

// Snapshot is what History knows at one moment, taken under one look so
// that its parts agree: the newest RV and the own writes newer than an RV.
type Snapshot struct {
	Newest         uint64 // 0 when no RV is known yet
	OwnWritesAfter int
}

// SnapshotAfter reads the newest RV and the own writes newer than rv now.
func (h *History) SnapshotAfter(rv uint64) Snapshot {
	newest, _, _ := h.Clock.Newest()
	return Snapshot{Newest: newest, OwnWritesAfter: h.OwnWritesAfter(rv)}
}
