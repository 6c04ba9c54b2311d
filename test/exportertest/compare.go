package exportertest

import (
	"math"
	"sort"
)

// Within reports whether got is within frac (a fraction of want) of want.
// A NaN on either side is never within: an unknown window fails a check.
func Within(got, want, frac float64) bool {
	return !math.IsNaN(got) && !math.IsNaN(want) && math.Abs(got-want) <= frac*math.Abs(want)
}

// Median is the median of f over xs: the upper middle one of an even count.
func Median[T any](xs []T, f func(T) float64) float64 {
	v := make([]float64, len(xs))
	for i, x := range xs {
		v[i] = f(x)
	}
	sort.Float64s(v)
	return v[len(v)/2]
}
