package load

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseSchedule(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Schedule
		wantErr string
	}{
		{in: "40:5m,100:5m,40:5m", want: Schedule{{40, 5 * time.Minute}, {100, 5 * time.Minute}, {40, 5 * time.Minute}}},
		{in: "0:30s,12.5:1m", want: Schedule{{0, 30 * time.Second}, {12.5, time.Minute}}},
		{in: "sweep:10:1000:3:2m", want: Schedule{{10, 2 * time.Minute}, {100, 2 * time.Minute}, {1000, 2 * time.Minute}, {100, 2 * time.Minute}}},
		{in: "sweep:10:400:6:3m", want: Schedule{{10, 3 * time.Minute}, {20.91, 3 * time.Minute}, {43.73, 3 * time.Minute}, {91.46, 3 * time.Minute}, {191.27, 3 * time.Minute}, {400, 3 * time.Minute}, {191.27, 3 * time.Minute}, {91.46, 3 * time.Minute}, {43.73, 3 * time.Minute}, {20.91, 3 * time.Minute}}},
		{in: "40:5m,100", wantErr: `step 2 "100": want rate:duration`},
		{in: "40:5m,x:1m", wantErr: `step 2 "x:1m": bad rate "x"`},
		{in: "-5:1m", wantErr: `step 1 "-5:1m": rate -5 is negative`},
		{in: "40:5x", wantErr: `step 1 "40:5x": bad duration "5x"`},
		{in: "40:500ms", wantErr: "shorter than 1s"},
		{in: "NaN:1m", wantErr: `bad rate "NaN"`},
		{in: "", wantErr: `step 1 "": want rate:duration`},
		{in: "sweep:10:400:6", wantErr: "want sweep:FROM:TO:STEPS:DURATION"},
		{in: "sweep:400:10:6:1m", wantErr: "want 0 < FROM < TO"},
		{in: "sweep:10:400:1:1m", wantErr: `sweep STEPS "1"`},
	} {
		got, err := ParseSchedule(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseSchedule(%q) error %v, want one containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseSchedule(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestScheduleValidate(t *testing.T) {
	s, _ := ParseSchedule("40:1m,600:1m")
	if err := s.Validate(500); err == nil || !strings.Contains(err.Error(), "step 2: rate 600 is above the cap of 500 writes/s") {
		t.Errorf("Validate: %v", err)
	}
	if err := Constant(500).Validate(500); err != nil {
		t.Errorf("a rate at the cap: %v", err)
	}
	// Durations whose sum overflows time.Duration: At divided by zero.
	s, err := ParseSchedule("1:2562047h,1:2562047h")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(500); err == nil || !strings.Contains(err.Error(), "longer than 168h") {
		t.Errorf("Validate(%v): %v", s, err)
	}
	if st, i, rem := s.At(time.Hour); st != s[0] || i != 0 || rem != 0 {
		t.Errorf("At of an invalid schedule = %v, %d, %v; want its first step held", st, i, rem)
	}
	if s, _ := ParseSchedule("1:84h,2:84h"); s.Validate(500) != nil {
		t.Errorf("a week in all: %v", s.Validate(500))
	}
}

func TestScheduleAt(t *testing.T) {
	s, _ := ParseSchedule("40:1m,100:2m")
	for _, tc := range []struct {
		at        time.Duration
		rate      float64
		index     int
		remaining time.Duration
	}{
		{0, 40, 0, time.Minute},
		{59 * time.Second, 40, 0, time.Second},
		{time.Minute, 100, 1, 2 * time.Minute},
		{3 * time.Minute, 40, 0, time.Minute}, // repeated
		{7*time.Minute + 30*time.Second, 100, 1, 90 * time.Second},
	} {
		st, i, rem := s.At(tc.at)
		if st.Rate != tc.rate || i != tc.index || rem != tc.remaining {
			t.Errorf("At(%v) = %v, %d, %v; want %v, %d, %v", tc.at, st.Rate, i, rem, tc.rate, tc.index, tc.remaining)
		}
	}
	if st, _, rem := Constant(7).At(time.Hour); st.Rate != 7 || rem != 0 {
		t.Errorf("Constant(7).At(1h) = %v, %v", st, rem)
	}
}

func FuzzParseSchedule(f *testing.F) {
	for _, s := range []string{"40:5m,100:5m", "sweep:10:400:6:3m", "0:1s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sched, err := ParseSchedule(s)
		if err != nil {
			return
		}
		// Whatever parses, valid or not, At can walk without panicking;
		// a valid schedule's step lasts no longer than its duration.
		for _, at := range []time.Duration{0, time.Duration(len(s)) * time.Second, math.MaxInt64, math.MinInt64} {
			st, i, left := sched.At(at)
			if sched.Validate(1e308) == nil && !sched.IsConstant() && (st != sched[i] || left <= 0 || left > st.Duration) {
				t.Fatalf("%v.At(%s) = %v, %d, %s", sched, at, st, i, left)
			}
		}
	})
}
