package collector

import (
	"sync"
	"time"
)

// History is what the exporter knows about resourceVersions: when they were
// written (the RV clock, learnt from every RV it sees come into being), and
// which were its own ConfigMap writes.
type History struct {
	Clock *RVClock

	mu    sync.Mutex
	own   []uint64 // ring of the RVs of own writes, in order
	start int
	n     int
	total uint64
}

// NewHistory remembers about 11 minutes of RV clock (65536 samples at
// least 10 ms apart) and the last ownCapacity own writes.
func NewHistory(ownCapacity int) *History {
	return &History{Clock: NewRVClock(1<<16, 10*time.Millisecond), own: make([]uint64, max(ownCapacity, 1))}
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
	if h.n == len(h.own) {
		h.start = (h.start + 1) % len(h.own)
		h.n--
	}
	// Responses of concurrent writes arrive a little out of order: insert
	// in place, which moves only the few entries it overtakes.
	i := h.n
	for i > 0 && h.at(i-1) > rv {
		h.own[(h.start+i)%len(h.own)] = h.at(i - 1)
		i--
	}
	h.own[(h.start+i)%len(h.own)] = rv
	h.n++
}

func (h *History) at(i int) uint64 { return h.own[(h.start+i)%len(h.own)] }

// OwnWritesAfter counts the remembered own writes with an RV above rv.
func (h *History) OwnWritesAfter(rv uint64) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	lo, hi := 0, h.n // first index with at(i) > rv
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if h.at(mid) <= rv {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return h.n - lo
}

// OwnWrites is the number of own writes so far.
func (h *History) OwnWrites() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total
}
