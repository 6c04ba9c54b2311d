package rvclock

// ring is a fixed-size ring buffer that drops its oldest element when full
// (the bounded memory of the RV history): at most its capacity of T, oldest
// first. It is not safe for concurrent use; its owner locks.
type ring[T any] struct {
	buf      []T
	start, n int
}

// newRing returns a ring of capacity (at least 1).
func newRing[T any](capacity int) *ring[T] { return &ring[T]{buf: make([]T, max(capacity, 1))} }

// Len is the number of elements held.
func (r *ring[T]) Len() int { return r.n }

// At is the i-th element, 0 the oldest. i must be in [0, Len()).
func (r *ring[T]) At(i int) *T { return &r.buf[(r.start+i)%len(r.buf)] }

// Push appends v, dropping the oldest element when full.
func (r *ring[T]) Push(v T) {
	if r.n == len(r.buf) {
		r.start = (r.start + 1) % len(r.buf)
		r.n--
	}
	*r.At(r.n) = v
	r.n++
}

// Search is the smallest i in [0, Len()) for which f(At(i)) is true, or Len();
// f must be false and then true along the ring, as for sort.Search.
func (r *ring[T]) Search(f func(*T) bool) int {
	lo, hi := 0, r.n
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if !f(r.At(mid)) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}
