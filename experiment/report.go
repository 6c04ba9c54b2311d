// Package experiment is the report of `watchcache-exporter experiment`: the
// article's experiment run once on a cluster, per apiserver. It renders what
// the daemon's parts measured (collector.Cycle) as text, JSON or Markdown,
// and the live progress line; it measures nothing itself. Its lifetime is
// one run of the command.
package experiment

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/watchcache/watchcache-exporter/collector"
	"github.com/watchcache/watchcache-exporter/model"
)

// Report is one run of the experiment. Its JSON field names are stable:
// README.md documents each.
type Report struct {
	Namespace string `json:"namespace"`
	// WritesPerSecond is the load's rate, over NoiseObjects ConfigMaps.
	WritesPerSecond float64 `json:"writesPerSecond"`
	NoiseObjects    int     `json:"noiseObjects"`
	// HistoryWindowSeconds is the apiserver's history window the
	// prediction takes (--apiserver.history-window).
	HistoryWindowSeconds float64 `json:"historyWindowSeconds"`
	// Predicted is what the apiserver's sizing rules give at this rate
	// after a long time at it.
	Predicted Prediction `json:"predicted"`
	// TimeoutSeconds is --timeout; TimedOut says whether it ended the run
	// before every apiserver had its cycles.
	TimeoutSeconds float64     `json:"timeoutSeconds"`
	TimedOut       bool        `json:"timedOut"`
	APIServers     []APIServer `json:"apiservers"`
}

// Prediction is the watch cache's steady state at a constant rate.
type Prediction struct {
	// Capacity is the smallest 100·2^k events that hold the history
	// window's writes (at most 102400 with the default window).
	Capacity int `json:"capacity"`
	// WindowSeconds is how long that capacity lasts at the rate: about
	// when a resourceVersion is refused, counted from its write.
	WindowSeconds float64 `json:"windowSeconds"`
}

// Predict is the steady state at rate writes/s for a history window.
func Predict(rate float64, window time.Duration) Prediction {
	c, s := model.SteadyState(rate, window)
	return Prediction{Capacity: c, WindowSeconds: s}
}

// APIServer is one apiserver's cycles, in the order they ended.
type APIServer struct {
	APIServer string  `json:"apiserver"`
	Cycles    []Cycle `json:"cycles"`
	// Spread over the cycles, with more than one.
	Spread *Spread `json:"spread,omitempty"`
	// Resources are the windows of --resources as the run ended.
	Resources []ResourceWindow `json:"resources,omitempty"`
}

// Cycle is one expiry cycle: the article's table for one apiserver.
type Cycle struct {
	// The first BOOKMARK of the bookmark watcher: how long after its watch
	// opened, and its RV; 0 and 0 when none came.
	FirstBookmarkSeconds float64 `json:"firstBookmarkSeconds"`
	FirstBookmarkRV      uint64  `json:"firstBookmarkResourceVersion"`
	// PlainWatcherEvents the watcher without bookmarks saw, by the end: the
	// touches of quiet that began each cycle, as nothing else writes it.
	PlainWatcherEvents uint64 `json:"plainWatcherEvents"`
	// StaleRV is the quiet ConfigMap's RV at the cycle's start; the cycle
	// ends at the first 410 of a reconnect from it, WritesTo410 of the
	// exporter's writes and SecondsTo410 later.
	StaleRV      uint64  `json:"staleResourceVersion"`
	WritesTo410  uint64  `json:"writesTo410"`
	SecondsTo410 float64 `json:"secondsTo410"`
	// Message is the apiserver's own; OldestRV its O, the oldest RV a
	// watch may still start from (0: the message gives none), and
	// StaleDistance O minus StaleRV.
	Message       string `json:"message"`
	OldestRV      uint64 `json:"oldestResourceVersion"`
	StaleDistance int64  `json:"staleDistance"`
	// EventsInCache are the exporter's writes newer than O at the 410: the
	// cache's capacity when nothing else writes configmaps.
	EventsInCache int `json:"eventsInCache"`
	// The reconnect from the latest BOOKMARK's RV at the same moment: ok,
	// expired, error, or none (no BOOKMARK yet), and the BOOKMARK's age.
	BookmarkRV         uint64  `json:"bookmarkResourceVersion"`
	BookmarkAgeSeconds float64 `json:"bookmarkAgeSeconds"`
	BookmarkReconnect  string  `json:"bookmarkReconnect"`
	BookmarkMessage    string  `json:"bookmarkMessage,omitempty"`
	// RelistRV is what a list of the quiet ConfigMap gave right after: where
	// a client without a BOOKMARK starts again. 0 when it failed.
	RelistRV uint64 `json:"relistResourceVersion"`
}

// FromCycle is the report's view of a collector.Cycle.
func FromCycle(c collector.Cycle) Cycle {
	out := Cycle{
		FirstBookmarkSeconds: c.FirstBookmarkAfter.Seconds(),
		FirstBookmarkRV:      c.FirstBookmarkRV,
		PlainWatcherEvents:   c.PlainEvents,
		StaleRV:              c.StaleRV,
		WritesTo410:          c.Writes,
		SecondsTo410:         c.Refused.Sub(c.Started).Seconds(),
		Message:              c.Message,
		OldestRV:             c.Refusal.Oldest,
		EventsInCache:        c.InCache,
		BookmarkReconnect:    "none",
		RelistRV:             c.RelistRV,
	}
	if c.Refusal.Oldest != 0 {
		out.StaleDistance = int64(c.Refusal.Oldest) - int64(c.StaleRV)
	}
	if c.BookmarkRV != 0 {
		out.BookmarkRV = c.BookmarkRV
		out.BookmarkAgeSeconds = c.BookmarkResult.Answered.Sub(c.BookmarkAt).Seconds()
		out.BookmarkReconnect = c.BookmarkResult.Outcome.String()
		switch c.BookmarkResult.Outcome {
		case collector.Expired:
			out.BookmarkMessage = c.BookmarkResult.Message
		case collector.Error:
			out.BookmarkMessage = c.BookmarkResult.Err.Error()
		}
	}
	return out
}

// Spread is the least, median and most of two figures over the cycles.
type Spread struct {
	SecondsTo410 MinMedianMax `json:"secondsTo410"`
	WritesTo410  MinMedianMax `json:"writesTo410"`
}

// MinMedianMax of a figure.
type MinMedianMax struct {
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
}

// SpreadOf the cycles; nil for fewer than two.
func SpreadOf(cs []Cycle) *Spread {
	if len(cs) < 2 {
		return nil
	}
	var secs, writes []float64
	for _, c := range cs {
		secs = append(secs, c.SecondsTo410)
		writes = append(writes, float64(c.WritesTo410))
	}
	return &Spread{SecondsTo410: mmm(secs), WritesTo410: mmm(writes)}
}

func mmm(v []float64) MinMedianMax {
	slices.Sort(v)
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return MinMedianMax{Min: v[0], Median: med, Max: v[len(v)-1]}
}

// ResourceWindow is one resource's window on one apiserver.
type ResourceWindow struct {
	Group    string  `json:"group"`
	Resource string  `json:"resource"`
	Seconds  float64 `json:"seconds"` // NaN is written as null
	// LowerBound: the RV clock did not reach back to the oldest event.
	LowerBound bool `json:"lowerBound"`
}

// MarshalJSON writes an unknown window as null: JSON has no NaN.
func (w ResourceWindow) MarshalJSON() ([]byte, error) {
	type plain ResourceWindow
	v := struct {
		plain
		Seconds *float64 `json:"seconds"`
	}{plain: plain(w)}
	if !math.IsNaN(w.Seconds) && !math.IsInf(w.Seconds, 0) {
		v.Seconds = &w.Seconds
	}
	return json.Marshal(v)
}

// Formats of --output.
var Formats = []string{"text", "json", "markdown"}

// Write renders r in format, one of Formats.
func (r *Report) Write(w io.Writer, format string) error {
	switch format {
	case "json":
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(r)
	case "markdown":
		return r.markdown(w)
	case "text":
		return r.text(w)
	}
	return fmt.Errorf("unknown format %q: want one of %s", format, strings.Join(Formats, ", "))
}

// rows are the table's lines for one cycle: a label and its figures.
func rows(c Cycle) [][2]string {
	first := "none came"
	if c.FirstBookmarkRV != 0 {
		first = fmt.Sprintf("%.1f s after the watch opened, resourceVersion %d", c.FirstBookmarkSeconds, c.FirstBookmarkRV)
	}
	oldest := "the message names no oldest resourceVersion"
	if c.OldestRV != 0 {
		oldest = fmt.Sprintf("O = %d, %d resourceVersions past the stale one", c.OldestRV, c.StaleDistance)
	}
	bm := "none: no BOOKMARK had come yet"
	if c.BookmarkReconnect != "none" {
		bm = fmt.Sprintf("%s, from resourceVersion %d, a BOOKMARK %.1f s old", c.BookmarkReconnect, c.BookmarkRV, c.BookmarkAgeSeconds)
		if c.BookmarkMessage != "" {
			bm += ": " + c.BookmarkMessage
		}
	}
	relist := "failed"
	if c.RelistRV != 0 {
		relist = fmt.Sprintf("resourceVersion %d", c.RelistRV)
	}
	return [][2]string{
		{"first BOOKMARK", first},
		{"plain watcher", fmt.Sprintf("%d events (the touches of quiet); its newest RV is the stale one", c.PlainWatcherEvents)},
		{"first 410", fmt.Sprintf("after %d writes and %.1f s (%.1f writes/s): %q", c.WritesTo410, c.SecondsTo410, float64(c.WritesTo410)/c.SecondsTo410, c.Message)},
		{"", oldest},
		{"events in the cache", fmt.Sprintf("%d (the exporter's writes newer than O)", c.EventsInCache)},
		{"BOOKMARK reconnect", bm},
		{"relist", relist},
	}
}

func (r *Report) text(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "watch cache experiment: namespace %s, %g writes/s over %d ConfigMaps\n", r.Namespace, r.WritesPerSecond, r.NoiseObjects)
	for _, a := range r.APIServers {
		fmt.Fprintf(&b, "\napiserver %s\n", a.APIServer)
		for i, c := range a.Cycles {
			if len(a.Cycles) > 1 {
				fmt.Fprintf(&b, "  cycle %d\n", i+1)
			}
			for _, row := range rows(c) {
				fmt.Fprintf(&b, "  %-22s %s\n", row[0], row[1])
			}
		}
		if s := a.Spread; s != nil {
			fmt.Fprintf(&b, "  %-22s %.1f / %.1f / %.1f s, %.0f / %.0f / %.0f writes (least / median / most of %d cycles)\n", "spread",
				s.SecondsTo410.Min, s.SecondsTo410.Median, s.SecondsTo410.Max, s.WritesTo410.Min, s.WritesTo410.Median, s.WritesTo410.Max, len(a.Cycles))
		}
		if len(a.Cycles) == 0 {
			fmt.Fprintf(&b, "  %-22s none within %s\n", "first 410", time.Duration(r.TimeoutSeconds*float64(time.Second)))
		}
		for _, rw := range a.Resources {
			fmt.Fprintf(&b, "  %-22s %s\n", "window of "+resourceName(rw), windowText(rw))
		}
	}
	for _, para := range strings.Split(r.explanation(), "\n\n") {
		b.WriteString("\n" + wrap(para, 100) + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// wrap breaks s into lines of at most width characters, at spaces.
func wrap(s string, width int) string {
	var b strings.Builder
	n := 0
	for i, word := range strings.Fields(s) {
		switch {
		case i == 0:
		case n+1+len(word) > width:
			b.WriteString("\n")
			n = 0
		default:
			b.WriteString(" ")
			n++
		}
		b.WriteString(word)
		n += len(word)
	}
	return b.String()
}

func (r *Report) markdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "**Watch cache experiment**: namespace `%s`, %g writes/s over %d ConfigMaps.\n", r.Namespace, r.WritesPerSecond, r.NoiseObjects)
	for _, a := range r.APIServers {
		fmt.Fprintf(&b, "\n### apiserver %s\n\n", a.APIServer)
		if len(a.Cycles) == 0 {
			fmt.Fprintf(&b, "No 410 within %s.\n", time.Duration(r.TimeoutSeconds*float64(time.Second)))
		}
		for i, c := range a.Cycles {
			if len(a.Cycles) > 1 {
				fmt.Fprintf(&b, "Cycle %d\n\n", i+1)
			}
			b.WriteString("| | |\n|---|---|\n")
			for _, row := range rows(c) {
				fmt.Fprintf(&b, "| %s | %s |\n", row[0], strings.ReplaceAll(row[1], "|", `\|`))
			}
			b.WriteString("\n")
		}
		if s := a.Spread; s != nil {
			fmt.Fprintf(&b, "Spread over %d cycles (least / median / most): %.1f / %.1f / %.1f s, %.0f / %.0f / %.0f writes.\n\n", len(a.Cycles),
				s.SecondsTo410.Min, s.SecondsTo410.Median, s.SecondsTo410.Max, s.WritesTo410.Min, s.WritesTo410.Median, s.WritesTo410.Max)
		}
		if len(a.Resources) > 0 {
			b.WriteString("| resource | window |\n|---|---|\n")
			for _, rw := range a.Resources {
				fmt.Fprintf(&b, "| %s | %s |\n", resourceName(rw), windowText(rw))
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\n" + r.explanation() + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// explanation says what the sizing rules predict at this rate, and, when the
// run timed out, why no 410 may come.
func (r *Report) explanation() string {
	p := r.Predicted
	s := fmt.Sprintf("Predicted at %g writes/s: the apiserver sizes the cache to the smallest 100·2^k events that hold %.0f s of writes, %d events, "+
		"so a resourceVersion is refused about %.1f s (%d writes) after it was written. The cache only grows while its oldest event is younger than %.0f s, "+
		"and shrinks only when it is full and a quarter of it is older: after a faster spell it can hold up to twice as many events, and a reconnect may "+
		"still succeed after far more writes. Compare the events in the cache with watch_cache_capacity{resource=\"configmaps\"} in the apiserver's /metrics.",
		r.WritesPerSecond, r.HistoryWindowSeconds, p.Capacity, p.WindowSeconds, p.Capacity, r.HistoryWindowSeconds)
	if r.TimedOut {
		s += fmt.Sprintf("\n\nNo 410 came from every apiserver within --timeout=%s. A 410 needs the cache to drop the stale resourceVersion: "+
			"about %d writes at this rate (%.0f s), and more when the cache grew larger before (it keeps its size until it is full of older events). "+
			"Give it a longer --timeout or a higher --load.rate.",
			time.Duration(r.TimeoutSeconds*float64(time.Second)), p.Capacity, p.WindowSeconds)
	}
	return s
}

func resourceName(w ResourceWindow) string {
	if w.Group == "" {
		return w.Resource
	}
	return w.Resource + "." + w.Group
}

func windowText(w ResourceWindow) string {
	switch {
	case math.IsNaN(w.Seconds):
		return "unknown"
	case w.LowerBound:
		return fmt.Sprintf("at least %.1f s", w.Seconds)
	}
	return fmt.Sprintf("%.1f s", w.Seconds)
}
