package load

import (
	"testing"
	"time"
)

// Writes due while the workers are busy and the channel is full are dropped,
// not owed; fractions carry over to the next tick.
func TestPacerTick(t *testing.T) {
	tokens := make(chan struct{}, 5)
	t0 := time.Unix(0, 0)
	p := pacer{last: t0}
	drain := func() (n int) {
		for {
			select {
			case <-tokens:
				n++
			default:
				return n
			}
		}
	}
	for _, step := range []struct {
		at   time.Duration
		rate float64
		want int
	}{
		{100 * time.Millisecond, 25, 2},  // 2.5 due
		{200 * time.Millisecond, 25, 3},  // 0.5 + 2.5
		{300 * time.Millisecond, 100, 5}, // 10 due, room for 5: 5 dropped
		{400 * time.Millisecond, 0, 0},   // nothing owed
		{1400 * time.Millisecond, 3, 3},  // a late tick: a second's worth
	} {
		p.tick(t0.Add(step.at), step.rate, tokens)
		if got := drain(); got != step.want {
			t.Errorf("at %v, rate %v: %d tokens, want %d", step.at, step.rate, got, step.want)
		}
	}
}
