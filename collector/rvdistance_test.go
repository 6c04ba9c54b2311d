package collector

import "testing"

// RVs past 2^53 are not exact as floats: the distance is subtracted first.
func TestRVDistance(t *testing.T) {
	const big = 1<<60 + 1
	for _, tc := range []struct {
		a, b uint64
		want float64
	}{
		{big + 7, big, 7},
		{big, big + 7, -7},
		{5, 5, 0},
	} {
		if got := rvDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("rvDistance(%d, %d) = %v, want %v (as floats: %v)", tc.a, tc.b, got, tc.want, float64(tc.a)-float64(tc.b))
		}
	}
}
