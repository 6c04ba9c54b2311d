package rvclock

// OldestServed finds, by bisection, the smallest RV in (lo, hi] that served
// accepts, given that lo is refused and hi accepted, and that every RV
// above an accepted one is accepted too (etcd's compaction: one revision
// splits the refused from the served). served's known is false when the
// answer was neither (an error): the search then gives up, ok false.
func OldestServed(lo, hi uint64, served func(rv uint64) (ok, known bool)) (rv uint64, ok bool) {
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, known := served(mid)
		if !known {
			return 0, false
		}
		if ok {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, true
}
