package rvclock

import (
	"sync"
	"time"
)

// History is what the exporter knows about resourceVersions: when they were
// written (the Clock, learnt from every RV it sees come into being), and
// which were its own ConfigMap writes.
type History struct {
	Clock *Clock

	mu    sync.Mutex
	own   *ring[uint64] // RVs of own writes, in order
	total uint64
}

// NewHistory remembers about 11 minutes of RV clock (65536 samples at
// least 10 ms apart) and the last ownCapacity own writes.
func NewHistory(ownCapacity int) *History {
	return &History{Clock: NewClock(1<<16, 10*time.Millisecond), own: newRing[uint64](ownCapacity)}
}

// Observe records an RV the exporter saw come into being at t (a BOOKMARK,
// a fresh list) that was not its own write.
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
