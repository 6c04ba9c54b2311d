package rvclock

import (
	"testing"
	"time"
)

func TestHistoryOwnWrites(t *testing.T) {
	h := NewHistory(5)
	// Own writes 10, 12, 11 (out of order), 14, 16, 18: the ring keeps the
	// last five, sorted.
	for i, rv := range []uint64{10, 12, 11, 14, 16, 18} {
		h.ObserveWrite(rv, t0.Add(time.Duration(i)*time.Second))
	}
	h.Observe(20, t0.Add(7*time.Second)) // a BOOKMARK: the clock only
	for _, tc := range []struct {
		after uint64
		want  int
	}{{0, 5}, {11, 4}, {12, 3}, {13, 3}, {17, 1}, {18, 0}, {100, 0}} {
		if got := h.OwnWritesAfter(tc.after); got != tc.want {
			t.Errorf("OwnWritesAfter(%d) = %d, want %d", tc.after, got, tc.want)
		}
	}
	if h.OwnWrites() != 6 {
		t.Errorf("OwnWrites() = %d, want 6", h.OwnWrites())
	}
	if rv, _, _ := h.Clock.Newest(); rv != 20 {
		t.Errorf("clock's newest RV %d, want 20", rv)
	}
}
