package experiment

import (
	"fmt"
	"io"
	"math"
	"time"
)

// Progress is one look at a running experiment, over every apiserver.
type Progress struct {
	Elapsed time.Duration
	Writes  uint64  // the exporter's, so far
	Rate    float64 // writes/s over the last few seconds; NaN before two looks
	// Window is the shortest ConfigMap window over the apiservers so far;
	// NaN while unknown.
	Window float64
	// Distance is O minus the stale RV, the largest over the apiservers
	// still in a cycle: negative while the stale RV is served, its
	// distance to the 410. NaN while unknown.
	Distance float64
	// Cycles ended so far, and wanted: --repeat per apiserver.
	Cycles, Want int
}

func (p Progress) String() string {
	s := fmt.Sprintf("%s  %d writes", p.Elapsed.Round(time.Second), p.Writes)
	if !math.IsNaN(p.Rate) {
		s += fmt.Sprintf("  %.1f/s", p.Rate)
	}
	if !math.IsNaN(p.Window) {
		s += fmt.Sprintf("  window %.1f s", p.Window)
	}
	switch {
	case math.IsNaN(p.Distance):
	case p.Distance < 0:
		s += fmt.Sprintf("  stale RV - O = %.0f", -p.Distance)
	default:
		s += "  stale RV refused"
	}
	return s + fmt.Sprintf("  cycles %d/%d", p.Cycles, p.Want)
}

// Line shows progress: on a terminal, one line rewritten in place; on
// anything else, a plain line every so often, as a log would have it.
type Line struct {
	w     io.Writer
	tty   bool
	every time.Duration
	last  time.Time
	shown bool
}

// NewLine writes to w, a terminal when tty; off a terminal, a line per every.
func NewLine(w io.Writer, tty bool, every time.Duration) *Line {
	return &Line{w: w, tty: tty, every: every}
}

// Show shows p as of now.
func (l *Line) Show(now time.Time, p Progress) {
	switch {
	case l.tty:
		// Carriage return, the line, then erase what a longer line left.
		fmt.Fprintf(l.w, "\r%s\x1b[K", p)
		l.shown = true
	case l.last.IsZero() || now.Sub(l.last) >= l.every:
		fmt.Fprintln(l.w, p)
		l.last = now
	}
}

// Clear takes the line off a terminal, before the report is printed.
func (l *Line) Clear() {
	if l.tty && l.shown {
		fmt.Fprint(l.w, "\r\x1b[K")
		l.shown = false
	}
}
