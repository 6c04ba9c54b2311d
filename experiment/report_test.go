package experiment

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/watchcache/watchcache-exporter/collector"
)

var t0 = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)

// articleCycle is the article's run as the collector would give it.
func articleCycle() collector.Cycle {
	return collector.Cycle{
		StaleRV: 41857, Started: t0, Refused: t0.Add(85 * time.Second),
		Refusal: collector.Refusal{Source: collector.SourceWatchCache, Requested: 41857, Oldest: 42466},
		Message: "too old resource version: 41857 (42466)",
		Writes:  7000, InCache: 6400,
		BookmarkRV: 46796, BookmarkAt: t0.Add(58 * time.Second),
		BookmarkResult:  collector.ProbeResult{Outcome: collector.OK, At: t0.Add(85 * time.Second), Answered: t0.Add(85*time.Second + 250*time.Millisecond)},
		FirstBookmarkRV: 46796, FirstBookmarkAfter: 59700 * time.Millisecond,
		RelistRV: 48998, PlainEvents: 1,
	}
}

func TestFromCycle(t *testing.T) {
	got := FromCycle(articleCycle())
	want := Cycle{
		FirstBookmarkSeconds: 59.7, FirstBookmarkRV: 46796, PlainWatcherEvents: 1,
		StaleRV: 41857, WritesTo410: 7000, SecondsTo410: 85,
		Message: "too old resource version: 41857 (42466)", OldestRV: 42466, StaleDistance: 609,
		EventsInCache: 6400,
		BookmarkRV:    46796, BookmarkAgeSeconds: 27.25, BookmarkReconnect: "ok",
		RelistRV: 48998,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("FromCycle:\n got %+v\nwant %+v", got, want)
	}

	c := articleCycle()
	c.BookmarkRV = 0
	c.Refusal.Oldest = 0
	c.RelistRV = 0
	got = FromCycle(c)
	if got.BookmarkReconnect != "none" || got.StaleDistance != 0 || got.BookmarkAgeSeconds != 0 {
		t.Errorf("without a BOOKMARK or O: %+v", got)
	}
	c = articleCycle()
	c.BookmarkResult = collector.ProbeResult{Outcome: collector.Error, Err: errors.New("connection refused")}
	if got := FromCycle(c); got.BookmarkReconnect != "error" || got.BookmarkMessage != "connection refused" {
		t.Errorf("failed BOOKMARK reconnect: %+v", got)
	}
}

func report(timedOut bool) *Report {
	return &Report{
		Namespace: "default", WritesPerSecond: 85, NoiseObjects: 8, HistoryWindowSeconds: 75,
		Predicted: Predict(85, 75*time.Second), TimeoutSeconds: 600, TimedOut: timedOut,
		APIServers: []APIServer{{
			APIServer: "127.0.0.1:6443", Cycles: []Cycle{FromCycle(articleCycle())},
			Resources: []ResourceWindow{{Resource: "pods", Seconds: 80.5}, {Group: "coordination.k8s.io", Resource: "leases", Seconds: math.NaN()}},
		}},
	}
}

func TestPredict(t *testing.T) {
	// 75 s x 85 writes/s = 6375 events: the smallest 100·2^k above is 6400.
	if p := Predict(85, 75*time.Second); p.Capacity != 6400 || math.Abs(p.WindowSeconds-6400.0/85) > 1e-9 {
		t.Errorf("Predict(85) = %+v, want 6400 events, %.2f s", p, 6400.0/85)
	}
}

func TestText(t *testing.T) {
	var b bytes.Buffer
	if err := report(false).Write(&b, "text"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"apiserver 127.0.0.1:6443",
		"59.7 s after the watch opened, resourceVersion 46796",
		`after 7000 writes and 85.0 s (82.4 writes/s): "too old resource version: 41857 (42466)"`,
		"O = 42466, 609 resourceVersions past the stale one",
		"6400 (the exporter's writes newer than O)",
		"ok, from resourceVersion 46796, a BOOKMARK 27.2 s old",
		"relist                 resourceVersion 48998",
		"window of pods         80.5 s",
		"window of leases.coordination.k8s.io unknown",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text report lacks %q:\n%s", want, out)
		}
	}
	// The explanation, wrapped at 100 columns.
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"Predicted at 85 writes/s", "6400 events", "75.3 s (6400 writes)"} {
		if !strings.Contains(flat, want) {
			t.Errorf("text report lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if len(line) > 100 && !strings.Contains(line, "first 410") {
			t.Errorf("a line of %d characters: %q", len(line), line)
		}
	}
	if strings.Contains(out, "No 410 came") {
		t.Errorf("a run that got its 410 explains a timeout:\n%s", out)
	}
	b.Reset()
	r := report(true)
	r.APIServers[0].Cycles = nil
	if err := r.Write(&b, "text"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"first 410 none within 10m0s", "No 410 came from every apiserver within --timeout=10m0s", "about 6400 writes at this rate (75 s)"} {
		if !strings.Contains(strings.Join(strings.Fields(b.String()), " "), want) {
			t.Errorf("timed-out report lacks %q:\n%s", want, b.String())
		}
	}
}

func TestMarkdown(t *testing.T) {
	var b bytes.Buffer
	if err := report(false).Write(&b, "markdown"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"### apiserver 127.0.0.1:6443", "| first BOOKMARK | 59.7 s after the watch opened, resourceVersion 46796 |", "| pods | 80.5 s |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, b.String())
		}
	}
	if err := report(false).Write(&b, "yaml"); err == nil {
		t.Error("an unknown format wrote something")
	}
}

// jsonFields are the report's JSON field names, read from the types.
func jsonFields(t reflect.Type, into map[string]bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
			into[name] = true
		}
		jsonFields(f.Type, into)
	}
}

// TestJSON: the JSON parses, carries every field the types name (NaN as
// null), and README.md documents each of them.
func TestJSON(t *testing.T) {
	var b bytes.Buffer
	r := report(false)
	r.APIServers[0].Cycles = append(r.APIServers[0].Cycles, r.APIServers[0].Cycles[0])
	r.APIServers[0].Spread = SpreadOf(r.APIServers[0].Cycles)
	if err := r.Write(&b, "json"); err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatalf("JSON does not parse: %v\n%s", err, b.String())
	}
	found := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				found[k] = true
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	fields := map[string]bool{}
	jsonFields(reflect.TypeFor[Report](), fields)
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for f := range fields {
		// bookmarkMessage is left out when empty.
		if !found[f] && f != "bookmarkMessage" {
			t.Errorf("field %q missing from the JSON", f)
		}
		if !regexp.MustCompile("`" + f + "`").Match(readme) {
			t.Errorf("README.md does not document the JSON field %q", f)
		}
	}
	if !strings.Contains(b.String(), `"seconds": null`) {
		t.Errorf("an unknown window is not null:\n%s", b.String())
	}
}

func TestSpread(t *testing.T) {
	if SpreadOf([]Cycle{{SecondsTo410: 1}}) != nil {
		t.Error("a spread of one cycle")
	}
	cs := []Cycle{{SecondsTo410: 90, WritesTo410: 7000}, {SecondsTo410: 80, WritesTo410: 6000}, {SecondsTo410: 100, WritesTo410: 9000}}
	got := SpreadOf(cs)
	want := &Spread{SecondsTo410: MinMedianMax{80, 90, 100}, WritesTo410: MinMedianMax{6000, 7000, 9000}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("odd: %+v, want %+v", got, want)
	}
	got = SpreadOf(cs[:2])
	if got.SecondsTo410.Median != 85 || got.WritesTo410.Median != 6500 {
		t.Errorf("even median: %+v", got)
	}
	if cs[0].SecondsTo410 != 90 {
		t.Error("SpreadOf reordered its argument")
	}
}

func TestLine(t *testing.T) {
	p := Progress{Elapsed: 42 * time.Second, Writes: 3570, Rate: 85, Window: 41.9, Distance: -2950, Cycles: 0, Want: 1}
	const want = "42s  3570 writes  85.0/s  window 41.9 s  stale RV - O = 2950  cycles 0/1"
	if got := p.String(); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	unknown := Progress{Elapsed: time.Second, Rate: math.NaN(), Window: math.NaN(), Distance: math.NaN(), Want: 2}
	if got := unknown.String(); got != "1s  0 writes  cycles 0/2" {
		t.Errorf("unknown figures shown: %q", got)
	}

	// A terminal: each look rewrites the line in place, and Clear erases it.
	var term bytes.Buffer
	l := NewLine(&term, true, 10*time.Second)
	l.Show(t0, p)
	l.Show(t0.Add(time.Second), p)
	l.Clear()
	if got, want := term.String(), "\r"+want+"\x1b[K\r"+want+"\x1b[K\r\x1b[K"; got != want {
		t.Errorf("terminal:\n got %q\nwant %q", got, want)
	}
	// A pipe: a plain line every 10 s, and nothing to clear.
	var pipe bytes.Buffer
	l = NewLine(&pipe, false, 10*time.Second)
	for i := range 25 {
		l.Show(t0.Add(time.Duration(i)*time.Second), p)
	}
	l.Clear()
	if got := strings.Count(pipe.String(), "\n"); got != 3 || strings.ContainsAny(pipe.String(), "\r\x1b") {
		t.Errorf("pipe: %d lines, want 3 (at 0, 10 and 20 s), without control characters:\n%q", got, pipe.String())
	}
}

func TestFormatsListed(t *testing.T) {
	if !slices.Equal(Formats, []string{"text", "json", "markdown"}) {
		t.Errorf("Formats = %v", Formats)
	}
}

// With several apiservers, each has its block, in the order given, and the
// Markdown a section each.
func TestSeveralAPIServers(t *testing.T) {
	r := report(false)
	second := r.APIServers[0]
	second.APIServer = "127.0.0.2:6443"
	second.Cycles = []Cycle{FromCycle(articleCycle()), FromCycle(articleCycle())}
	second.Cycles[1].SecondsTo410, second.Cycles[1].WritesTo410 = 95, 8000
	second.Spread = SpreadOf(second.Cycles)
	r.APIServers = append(r.APIServers, second)
	var text, md bytes.Buffer
	if err := r.Write(&text, "text"); err != nil {
		t.Fatal(err)
	}
	if err := r.Write(&md, "markdown"); err != nil {
		t.Fatal(err)
	}
	a, b := strings.Index(text.String(), "apiserver 127.0.0.1:6443"), strings.Index(text.String(), "apiserver 127.0.0.2:6443")
	if a < 0 || b < a || !strings.Contains(text.String()[b:], "cycle 2") ||
		!strings.Contains(text.String()[b:], "85.0 / 90.0 / 95.0 s, 7000 / 7500 / 8000 writes (least / median / most of 2 cycles)") {
		t.Errorf("text with two apiservers:\n%s", text.String())
	}
	if strings.Count(md.String(), "### apiserver ") != 2 {
		t.Errorf("markdown with two apiservers:\n%s", md.String())
	}
}
