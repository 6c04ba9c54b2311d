// Package status serves the exporter's live status page: the window and the
// predicted window against the write rate over the last hour, every
// measured resource's window, the last expiry cycles, and what this process
// is (mode, leader or standby, version). It reads the exporter's own collectors (those of the
// families it plots, see Tee), so the page shows exactly what /metrics says.
package status

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"html"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/watchcache/watchcache-exporter/internal/gathered"
)

//go:embed index.html
var page []byte

// The families the page reads.
const (
	windowSeconds     = "watchcache_window_seconds"
	predictedWindow   = "watchcache_predicted_window_seconds"
	exporterWrites    = "watchcache_exporter_writes_total"
	clusterWrites     = "watchcache_cluster_writes_total"
	targetRate        = "watchcache_load_target_writes_per_second"
	expiryCycles      = "watchcache_expiry_cycles_total"
	expiryLast        = "watchcache_expiry_last_seconds"
	staleDistanceLast = "watchcache_stale_distance_last_resource_versions"
	windowLowerBound  = "watchcache_window_lower_bound"
	fleetWindow       = "watchcache_fleet_window_seconds"
	fleetLowerBound   = "watchcache_fleet_window_lower_bound"
)

var plottedFamilies = []string{windowSeconds, predictedWindow, exporterWrites, clusterWrites, targetRate, expiryCycles, expiryLast, staleDistanceLast,
	windowLowerBound, fleetWindow, fleetLowerBound}

// Tee registers every collector with reg and, when it describes a family
// the page plots, with page too; it unregisters from both. The page samples
// every few seconds: gathering the whole registry instead (23,000 series
// with --resources=all at 1000 resources and 3 apiservers) allocated about
// 20 MB each time, as much as the rest of the exporter held.
func Tee(reg, page prometheus.Registerer) prometheus.Registerer {
	return &tee{Registerer: reg, page: page}
}

type tee struct {
	prometheus.Registerer
	page prometheus.Registerer
}

func (t *tee) Register(c prometheus.Collector) error {
	if err := t.Registerer.Register(c); err != nil {
		return err
	}
	keep := plotted(c)
	if len(keep) == 0 {
		return nil
	}
	pc := c
	if cc, ok := c.(ColumnCollector); ok {
		pc = pageView{cc, keep}
	}
	if err := t.page.Register(pc); err != nil {
		t.Registerer.Unregister(c)
		return err
	}
	return nil
}

// ColumnCollector collects several families, and can collect some of them
// alone: the page gathers only those it plots from the tables of every
// resource's window (half of their 16,000 series at 1000 resources and 3
// apiservers).
type ColumnCollector interface {
	prometheus.Collector
	CollectColumns(ch chan<- prometheus.Metric, keep func(*prometheus.Desc) bool)
}

// pageView is a ColumnCollector as the page registers it: described whole,
// so that unregistering the collector finds it, and collected in part.
type pageView struct {
	ColumnCollector
	keep map[*prometheus.Desc]bool
}

func (v pageView) Collect(ch chan<- prometheus.Metric) {
	v.CollectColumns(ch, func(d *prometheus.Desc) bool { return v.keep[d] })
}

func (t *tee) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := t.Register(c); err != nil {
			panic(err)
		}
	}
}

func (t *tee) Unregister(c prometheus.Collector) bool {
	t.page.Unregister(c)
	return t.Registerer.Unregister(c)
}

// plotted are the descriptors of c of families the page reads. A Desc
// keeps its name to itself but for its String form, Desc{fqName: "name", ...}.
func plotted(c prometheus.Collector) map[*prometheus.Desc]bool {
	descs := make(chan *prometheus.Desc)
	go func() {
		defer close(descs)
		c.Describe(descs)
	}()
	found := map[*prometheus.Desc]bool{}
	for d := range descs {
		_, rest, ok := strings.Cut(d.String(), `fqName: "`)
		name, _, _ := strings.Cut(rest, `"`)
		if ok && slices.Contains(plottedFamilies, name) {
			found[d] = true
		}
	}
	return found
}

// Sample is one look at the gauges.
type Sample struct {
	Time      int64              `json:"t"` // unix milliseconds
	Window    map[string]float64 `json:"window"`
	Fleet     *float64           `json:"fleet,omitempty"` // the ConfigMaps' fleet window
	Predicted *float64           `json:"predicted,omitempty"`
	// Rate is the write rate the model takes: the exporter's own writes
	// under load, every write of the cluster in passive mode.
	Rate   *float64 `json:"rate,omitempty"`
	Target *float64 `json:"target,omitempty"`
}

// Window is a window as the page shows it; Lower marks a lower bound.
type Window struct {
	Seconds float64 `json:"seconds"`
	Lower   bool    `json:"lower,omitempty"`
}

// Resource is one measured resource's window now: the fleet's and each
// apiserver's.
type Resource struct {
	Group      string            `json:"group"`
	Resource   string            `json:"resource"`
	Fleet      *Window           `json:"fleet,omitempty"`
	APIServers map[string]Window `json:"apiservers"`
}

// shortest is the window a client that may reconnect to any apiserver can
// rely on: the fleet's, or the shortest known; +Inf when none is known.
func (r Resource) shortest() float64 {
	if r.Fleet != nil {
		return r.Fleet.Seconds
	}
	m := math.Inf(1)
	for _, w := range r.APIServers {
		m = math.Min(m, w.Seconds)
	}
	return m
}

// About is what the page says of the process besides its series.
type About struct {
	// Mode is "load" or "passive".
	Mode    string
	Version string
	// Role says what this process is now: "leader", "standby" (and the
	// holder of the Lease), or "" while it holds nothing and sees no holder.
	Role func() (role, holder string)
}

// Cycle is one completed expiry cycle.
type Cycle struct {
	Time      int64    `json:"t"`
	APIServer string   `json:"apiserver"`
	Expiry    *float64 `json:"expirySeconds"`
	Distance  *float64 `json:"distance"`
	Bookmark  string   `json:"bookmarkReconnect"`
}

// rateSpan is how far back the rate line looks, as a Prometheus rate() over
// 30 s would: the counters step once per poll, and a rate between two
// samples alone zigzags by a poll's worth of writes.
const rateSpan = 30 * time.Second

type reading struct {
	n  float64
	at time.Time
}

// writeRate adds a reading of the write counter and returns the rate over
// the readings of the last rateSpan, nil with one reading or after a reset.
func (p *Page) writeRate(n float64, now time.Time) *float64 {
	if k := len(p.writeReadings); k > 0 && n < p.writeReadings[k-1].n {
		p.writeReadings = nil // a counter reset: no rate across it
	}
	p.writeReadings = append(p.writeReadings, reading{n, now})
	for len(p.writeReadings) > 2 && now.Sub(p.writeReadings[1].at) >= rateSpan {
		p.writeReadings = p.writeReadings[1:]
	}
	first := p.writeReadings[0]
	if len(p.writeReadings) < 2 || !now.After(first.at) {
		return nil
	}
	return finite((n - first.n) / now.Sub(first.at).Seconds())
}

// Page records samples from a registry and serves them.
type Page struct {
	g        prometheus.Gatherer
	interval time.Duration
	keep     int
	about    About

	// Owned by sample: the readings of the write counter the rate line is
	// taken from, over the last rateSpan.
	writeReadings []reading

	mu        sync.Mutex
	samples   []Sample
	cycles    []Cycle
	counts    map[[2]string]float64 // (apiserver, bookmark_result) -> cycles seen
	resources []Resource            // the last sample's, shortest window first
}

// New samples g every interval and keeps the last keep samples.
func New(g prometheus.Gatherer, interval time.Duration, keep int, about About) *Page {
	if about.Role == nil {
		about.Role = func() (string, string) { return "", "" }
	}
	return &Page{g: g, interval: interval, keep: keep, about: about, counts: map[[2]string]float64{}}
}

// Run samples until ctx ends.
func (p *Page) Run(ctx context.Context) {
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	for {
		p.sample(time.Now())
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func (p *Page) sample(now time.Time) {
	fams, err := p.g.Gather()
	if err != nil {
		return
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	s := Sample{Time: now.UnixMilli(), Window: map[string]float64{}}
	configMaps := func(m *dto.Metric) bool {
		return gathered.Label(m, "group") == "" && gathered.Label(m, "resource") == "configmaps"
	}
	for _, m := range byName[windowSeconds].GetMetric() {
		if v := finite(gathered.Value(m)); v != nil && configMaps(m) {
			s.Window[gathered.Label(m, "apiserver")] = *v
		}
	}
	for _, m := range byName[fleetWindow].GetMetric() {
		if configMaps(m) {
			s.Fleet = finite(gathered.Value(m))
		}
	}
	resources := resourceWindows(byName)
	// One line for the prediction: the shortest over the apiservers, what a
	// client that may reconnect to any of them can rely on.
	for _, m := range byName[predictedWindow].GetMetric() {
		if v := finite(gathered.Value(m)); v != nil && (s.Predicted == nil || *v < *s.Predicted) {
			s.Predicted = v
		}
	}
	writes := exporterWrites
	if p.about.Mode == "passive" {
		writes = clusterWrites
	}
	if ms := byName[writes].GetMetric(); len(ms) > 0 {
		s.Rate = p.writeRate(gathered.Value(ms[0]), now)
	} else {
		p.writeReadings = nil // unknown: no rate across the gap
	}
	if ms := byName[targetRate].GetMetric(); len(ms) > 0 {
		s.Target = finite(gathered.Value(ms[0]))
	}
	last := func(name, apiserver string) float64 {
		for _, m := range byName[name].GetMetric() {
			if gathered.Label(m, "apiserver") == apiserver {
				return gathered.Value(m)
			}
		}
		return math.NaN()
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	p.resources = resources
	p.samples = append(p.samples, s)
	if len(p.samples) > p.keep {
		p.samples = p.samples[len(p.samples)-p.keep:]
	}
	// Only the series there now are remembered: an apiserver that left is
	// forgotten, and one whose series came back (a won-back Lease starts
	// them at 0) is counted from 0 again, as a counter reset.
	counts := map[[2]string]float64{}
	for _, m := range byName[expiryCycles].GetMetric() {
		key := [2]string{gathered.Label(m, "apiserver"), gathered.Label(m, "bookmark_result")}
		v, prev := gathered.Value(m), p.counts[key]
		if v < prev {
			prev = 0
		}
		if v > prev {
			p.cycles = append(p.cycles, Cycle{
				Time: s.Time, APIServer: key[0], Bookmark: key[1],
				Expiry:   finite(last(expiryLast, key[0])),
				Distance: finite(last(staleDistanceLast, key[0])),
			})
		}
		counts[key] = v
	}
	p.counts = counts
	if len(p.cycles) > 50 {
		p.cycles = p.cycles[len(p.cycles)-50:]
	}
}

// resourceWindows are every measured resource's windows, shortest first;
// resources whose window is not known go last.
func resourceWindows(byName map[string]*dto.MetricFamily) []Resource {
	type key struct{ group, resource string }
	byKey := map[key]*Resource{}
	get := func(m *dto.Metric) *Resource {
		k := key{gathered.Label(m, "group"), gathered.Label(m, "resource")}
		r := byKey[k]
		if r == nil {
			r = &Resource{Group: k.group, Resource: k.resource, APIServers: map[string]Window{}}
			byKey[k] = r
		}
		return r
	}
	// The lower-bound flags by series, read once: 3000 windows at 1000
	// resources and 3 apiservers.
	type series struct{ apiserver, group, resource string }
	lowers := map[series]bool{}
	for _, fam := range []string{windowLowerBound, fleetLowerBound} {
		for _, m := range byName[fam].GetMetric() {
			lowers[series{gathered.Label(m, "apiserver"), gathered.Label(m, "group"), gathered.Label(m, "resource")}] = gathered.Value(m) == 1
		}
	}
	lower := func(apiserver, group, resource string) bool { return lowers[series{apiserver, group, resource}] }
	for _, m := range byName[windowSeconds].GetMetric() {
		r := get(m)
		if v := finite(gathered.Value(m)); v != nil {
			a := gathered.Label(m, "apiserver")
			r.APIServers[a] = Window{Seconds: *v, Lower: lower(a, r.Group, r.Resource)}
		}
	}
	for _, m := range byName[fleetWindow].GetMetric() {
		r := get(m)
		if v := finite(gathered.Value(m)); v != nil {
			r.Fleet = &Window{Seconds: *v, Lower: lower("", r.Group, r.Resource)}
		}
	}
	out := make([]Resource, 0, len(byKey))
	for _, r := range byKey {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b Resource) int {
		if c := cmp.Compare(a.shortest(), b.shortest()); c != 0 {
			return c
		}
		return cmp.Or(strings.Compare(a.Group, b.Group), strings.Compare(a.Resource, b.Resource))
	})
	return out
}

// JSONPath is where Handler serves the page's data.
const JSONPath = "/status.json"

// Handler serves the page at / and its data at JSONPath; the page links
// to metricsPath.
func (p *Page) Handler(metricsPath string) http.Handler {
	body := bytes.ReplaceAll(page, []byte("{{METRICS}}"), []byte(html.EscapeString(metricsPath)))
	csp := contentSecurityPolicy(page)
	mux := http.NewServeMux()
	mux.HandleFunc(JSONPath, func(w http.ResponseWriter, _ *http.Request) {
		role, holder := p.about.Role()
		type about struct {
			Mode    string `json:"mode"`
			Version string `json:"version"`
			Role    string `json:"role"`
			Holder  string `json:"holder,omitempty"`
		}
		p.mu.Lock()
		cycles := append([]Cycle(nil), p.cycles...)
		data := struct {
			About     about      `json:"about"`
			Samples   []Sample   `json:"samples"`
			Cycles    []Cycle    `json:"cycles"`
			Resources []Resource `json:"resources"`
		}{about{p.about.Mode, p.about.Version, role, holder}, append([]Sample(nil), p.samples...), cycles, p.resources}
		p.mu.Unlock()
		sort.Slice(data.Cycles, func(i, j int) bool { return data.Cycles[i].Time > data.Cycles[j].Time })
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_ = json.NewEncoder(w).Encode(data)
	})
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", csp)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(body)
	})
	return mux
}

// contentSecurityPolicy allows the page's own inline script and style (by
// their hashes), requests to its own origin, and nothing else: no other
// script, no inline style attributes, no framing.
func contentSecurityPolicy(page []byte) string {
	hash := func(open, close string) string {
		_, rest, _ := bytes.Cut(page, []byte(open))
		inner, _, _ := bytes.Cut(rest, []byte(close))
		sum := sha256.Sum256(inner)
		return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	}
	return "default-src 'none'; script-src " + hash("<script>", "</script>") +
		"; style-src " + hash("<style>", "</style>") +
		"; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}
