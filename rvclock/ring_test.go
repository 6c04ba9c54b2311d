package rvclock

import "testing"

func TestRing(t *testing.T) {
	r := newRing[int](3)
	if r.Len() != 0 || r.Search(func(*int) bool { return true }) != 0 {
		t.Fatal("empty ring not empty")
	}
	for i := 1; i <= 5; i++ {
		r.Push(i * 10)
	}
	var got []int
	for i := range r.Len() {
		got = append(got, *r.At(i))
	}
	if len(got) != 3 || got[0] != 30 || got[1] != 40 || got[2] != 50 {
		t.Fatalf("after 5 pushes into 3: %v, want [30 40 50]", got)
	}
	for _, tc := range []struct{ above, want int }{{0, 0}, {30, 1}, {45, 2}, {50, 3}} {
		if i := r.Search(func(v *int) bool { return *v > tc.above }); i != tc.want {
			t.Errorf("first > %d at %d, want %d", tc.above, i, tc.want)
		}
	}
	*r.At(0) = 1
	if *r.At(0) != 1 {
		t.Error("At does not address the element")
	}
}
