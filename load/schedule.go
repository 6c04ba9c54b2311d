package load

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Step is a write rate held for a while.
type Step struct {
	Rate     float64 // writes/s
	Duration time.Duration
}

// Schedule is a list of steps repeated forever. A single step with no
// duration is a constant rate (--load.rate).
type Schedule []Step

// Constant is the schedule of --load.rate.
func Constant(r float64) Schedule { return Schedule{{Rate: r}} }

// ParseSchedule reads --load.schedule. Two forms:
//
//	40:5m,100:5m,40:5m     steps of rate:duration, repeated
//	sweep:10:400:6:3m      from 10 to 400 writes/s in 6 geometric steps of
//	                       3m each, then back down, repeated
func ParseSchedule(s string) (Schedule, error) {
	if rest, ok := strings.CutPrefix(s, "sweep:"); ok {
		return parseSweep(rest)
	}
	var sched Schedule
	for i, part := range strings.Split(s, ",") {
		rate, dur, ok := strings.Cut(part, ":")
		if !ok {
			return nil, fmt.Errorf("step %d %q: want rate:duration, e.g. 40:5m", i+1, part)
		}
		st, err := parseStep(rate, dur)
		if err != nil {
			return nil, fmt.Errorf("step %d %q: %w", i+1, part, err)
		}
		sched = append(sched, st)
	}
	return sched, nil
}

func parseStep(rate, dur string) (Step, error) {
	r, err := parseRate(rate)
	if err != nil {
		return Step{}, err
	}
	d, err := time.ParseDuration(dur)
	if err != nil {
		return Step{}, fmt.Errorf("bad duration %q: want e.g. 30s, 5m", dur)
	}
	if d < time.Second {
		return Step{}, fmt.Errorf("duration %s is shorter than 1s", d)
	}
	return Step{Rate: r, Duration: d}, nil
}

func parseRate(s string) (float64, error) {
	r, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(r) || math.IsInf(r, 0) {
		return 0, fmt.Errorf("bad rate %q: want writes per second, e.g. 40 or 12.5", s)
	}
	if r < 0 {
		return 0, fmt.Errorf("rate %v is negative", r)
	}
	return r, nil
}

func parseSweep(s string) (Schedule, error) {
	f := strings.Split(s, ":")
	if len(f) != 4 {
		return nil, fmt.Errorf("sweep %q: want sweep:FROM:TO:STEPS:DURATION, e.g. sweep:10:400:6:3m", "sweep:"+s)
	}
	from, err := parseRate(f[0])
	if err != nil {
		return nil, fmt.Errorf("sweep FROM: %w", err)
	}
	to, err := parseRate(f[1])
	if err != nil {
		return nil, fmt.Errorf("sweep TO: %w", err)
	}
	if from <= 0 || to <= from {
		return nil, fmt.Errorf("sweep %s..%s: want 0 < FROM < TO", f[0], f[1])
	}
	n, err := strconv.Atoi(f[2])
	if err != nil || n < 2 || n > 100 {
		return nil, fmt.Errorf("sweep STEPS %q: want a whole number from 2 to 100", f[2])
	}
	st, err := parseStep(f[0], f[3])
	if err != nil {
		return nil, fmt.Errorf("sweep DURATION: %w", err)
	}
	var sched Schedule
	for i := range n {
		r := from * math.Pow(to/from, float64(i)/float64(n-1))
		sched = append(sched, Step{Rate: math.Round(r*100) / 100, Duration: st.Duration})
	}
	for i := n - 2; i >= 1; i-- { // and back down, without repeating the ends
		sched = append(sched, sched[i])
	}
	return sched, nil
}

// MaxPeriod bounds a schedule's period: a week of steps is more than any
// load test needs, and the sum of longer durations could overflow.
const MaxPeriod = 7 * 24 * time.Hour

const fmtPeriod = "168h (a week)"

// Validate checks the schedule against the cap; its errors name the step.
func (s Schedule) Validate(maxRate float64) error {
	if len(s) == 0 {
		return errors.New("no steps")
	}
	if !s.IsConstant() {
		var period time.Duration
		for _, st := range s {
			if st.Duration > MaxPeriod-period {
				return fmt.Errorf("the steps last longer than %s in all", fmtPeriod)
			}
			period += max(st.Duration, 0)
		}
	}
	for i, st := range s {
		var err error
		switch {
		case st.Rate < 0 || math.IsNaN(st.Rate) || math.IsInf(st.Rate, 0):
			err = fmt.Errorf("rate %v: must be a number of writes/s, 0 or more (0: no load)", st.Rate)
		case st.Rate > maxRate:
			err = fmt.Errorf("rate %v is above the cap of %v writes/s", st.Rate, maxRate)
		case !s.IsConstant() && st.Duration <= 0:
			err = errors.New("no duration")
		}
		if err != nil && !s.IsConstant() {
			err = fmt.Errorf("step %d: %w", i+1, err)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// IsConstant says whether s is one rate held forever (--load.rate).
func (s Schedule) IsConstant() bool { return len(s) == 1 && s[0].Duration <= 0 }

// Max is the highest rate of the schedule.
func (s Schedule) Max() float64 {
	m := 0.0
	for _, st := range s {
		m = max(m, st.Rate)
	}
	return m
}

// Passive says whether the schedule ever writes nothing.
func (s Schedule) Passive() bool {
	for _, st := range s {
		if st.Rate == 0 {
			return true
		}
	}
	return false
}

// At returns the step in force after elapsed, its index, and how long it
// still lasts (0: forever). A schedule that does not validate is its first
// step held forever.
func (s Schedule) At(elapsed time.Duration) (Step, int, time.Duration) {
	if len(s) == 0 {
		return Step{}, 0, 0
	}
	var period time.Duration
	for _, st := range s {
		if st.Duration <= 0 || st.Duration > MaxPeriod-period {
			return s[0], 0, 0
		}
		period += st.Duration
	}
	elapsed = max(elapsed, 0) % period
	for i, st := range s {
		if elapsed < st.Duration {
			return st, i, st.Duration - elapsed
		}
		elapsed -= st.Duration
	}
	return s[0], 0, 0 // not reached: elapsed < period
}

func (s Schedule) String() string {
	if s.IsConstant() {
		return strconv.FormatFloat(s[0].Rate, 'f', -1, 64) + "/s"
	}
	parts := make([]string, len(s))
	for i, st := range s {
		parts[i] = strconv.FormatFloat(st.Rate, 'f', -1, 64) + ":" + st.Duration.String()
	}
	return strings.Join(parts, ",")
}
