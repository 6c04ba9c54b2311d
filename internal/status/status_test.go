package status

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestPage(t *testing.T) {
	reg := prometheus.NewRegistry()
	window := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "watchcache_window_seconds"}, []string{"apiserver", "group", "resource"})
	cycles := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "watchcache_expiry_cycles_total"}, []string{"apiserver", "bookmark_result"})
	expiry := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "watchcache_expiry_last_seconds"}, []string{"apiserver"})
	predicted := prometheus.NewGauge(prometheus.GaugeOpts{Name: "watchcache_predicted_window_seconds"})
	reg.MustRegister(window, cycles, expiry, predicted)
	p := New(reg, time.Second, 2, About{Mode: "load"})

	predicted.Set(nan())
	window.WithLabelValues("a:6443", "", "configmaps").Set(80)
	cycles.WithLabelValues("a:6443", "ok")
	p.sample(time.Unix(100, 0))
	window.WithLabelValues("a:6443", "", "configmaps").Set(81)
	predicted.Set(79.5)
	expiry.WithLabelValues("a:6443").Set(76)
	cycles.WithLabelValues("a:6443", "ok").Inc()
	p.sample(time.Unix(101, 0))
	p.sample(time.Unix(102, 0)) // keeps 2 samples; no new cycle

	rec := httptest.NewRecorder()
	p.Handler("/m").ServeHTTP(rec, httptest.NewRequest("GET", "/status.json", nil))
	var got struct {
		Samples []Sample
		Cycles  []Cycle
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Samples) != 2 || got.Samples[0].Time != 101000 || got.Samples[0].Window["a:6443"] != 81 || *got.Samples[0].Predicted != 79.5 {
		t.Errorf("samples %+v", got.Samples)
	}
	if len(got.Cycles) != 1 || *got.Cycles[0].Expiry != 76 || got.Cycles[0].Distance != nil || got.Cycles[0].Bookmark != "ok" {
		t.Errorf("cycles %+v, want one at 76 s, no distance, bookmark ok", got.Cycles)
	}

	rec = httptest.NewRecorder()
	p.Handler("/m").ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if body := rec.Body.String(); !strings.Contains(body, `<a href="/m">Metrics</a>`) || strings.Contains(body, "{{METRICS}}") {
		t.Errorf("page does not link the metrics path")
	}
	// The policy names the page's one script by its hash; nothing else runs.
	csp := rec.Header().Get("Content-Security-Policy")
	_, script, _ := strings.Cut(rec.Body.String(), "<script>")
	script, _, _ = strings.Cut(script, "</script>")
	sum := sha256.Sum256([]byte(script))
	if want := "script-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "';"; !strings.Contains(csp, want) || !strings.HasPrefix(csp, "default-src 'none';") {
		t.Errorf("Content-Security-Policy %q, want default-src 'none' and %s", csp, want)
	}
	if strings.Contains(rec.Body.String(), "innerHTML") || strings.Contains(rec.Body.String(), ` style="`) {
		t.Error("the page sets markup from data (innerHTML) or has inline style attributes, which its policy blocks")
	}
	rec = httptest.NewRecorder()
	p.Handler("/m").ServeHTTP(rec, httptest.NewRequest("GET", "/nope", nil))
	if rec.Code != 404 {
		t.Errorf("GET /nope: %d, want 404", rec.Code)
	}
}

func nan() float64 { var z float64; return z / z }

// A standby deletes its series; when it wins the Lease back they start at 0
// again. Cycles after that are shown, and apiservers that left are
// forgotten.
func TestPageCyclesAfterLeaseWonBack(t *testing.T) {
	reg := prometheus.NewRegistry()
	cycles := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "watchcache_expiry_cycles_total"}, []string{"apiserver", "bookmark_result"})
	reg.MustRegister(cycles)
	p := New(reg, time.Second, 10, About{})
	for i := range 3 {
		cycles.WithLabelValues("a:6443", "ok").Inc()
		cycles.WithLabelValues("gone:6443", "ok").Inc()
		p.sample(time.Unix(int64(100+i), 0))
	}
	cycles.Reset() // standby
	p.sample(time.Unix(110, 0))
	if len(p.counts) != 0 {
		t.Errorf("counts kept for series that are gone: %v", p.counts)
	}
	cycles.WithLabelValues("a:6443", "ok").Inc() // leader again: 1, below the 3 seen before
	p.sample(time.Unix(120, 0))
	if n := len(p.cycles); n != 7 || p.cycles[n-1].Time != 120000 || p.cycles[n-1].APIServer != "a:6443" {
		t.Errorf("cycles %+v: want 6 before the standby and one at 120 s after it", p.cycles)
	}
}

// The page's registry gets the plotted families, with the labels of the
// registerer they came through, and nothing else; unregistering removes
// them from both.
func TestTee(t *testing.T) {
	reg, page := prometheus.NewRegistry(), prometheus.NewRegistry()
	regs := prometheus.WrapRegistererWith(prometheus.Labels{"apiserver": "a:6443"}, Tee(reg, page))
	window := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: windowSeconds}, []string{"resource"})
	cacheOn := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "watchcache_resource_watch_cache_enabled"}, []string{"resource"})
	regs.MustRegister(window, cacheOn)
	for _, r := range []string{"configmaps", "pods"} {
		window.WithLabelValues(r).Set(80)
		cacheOn.WithLabelValues(r).Set(1)
	}
	names := func(g prometheus.Gatherer) (out []string) {
		fams, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			out = append(out, f.GetName())
		}
		return out
	}
	if got := names(page); len(got) != 1 || got[0] != windowSeconds {
		t.Errorf("page registry: %v, want only %s", got, windowSeconds)
	}
	if got := names(reg); len(got) != 2 {
		t.Errorf("main registry: %v, want both families", got)
	}
	p := New(page, time.Second, 1, About{})
	p.sample(time.Unix(100, 0))
	if w := p.samples[0].Window; len(w) != 1 || w["a:6443"] != 80 {
		t.Errorf("sampled window %v, want 80 s for a:6443 (configmaps only)", w)
	}
	// A second registration of the same family fails in both or neither.
	if err := regs.Register(prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: windowSeconds}, []string{"resource"})); err == nil {
		t.Error("registered a duplicate collector")
	}
	if !regs.Unregister(window) || !regs.Unregister(cacheOn) {
		t.Fatal("unregister failed")
	}
	if got := append(names(page), names(reg)...); len(got) != 0 {
		t.Errorf("after unregister: %v left", got)
	}
}

// The rate line is the rate the model takes, from the counters between two
// samples: the exporter's own writes under load, the cluster's in passive
// mode, where the exporter writes nothing.
func TestPageRateByMode(t *testing.T) {
	reg := prometheus.NewRegistry()
	own := prometheus.NewCounter(prometheus.CounterOpts{Name: exporterWrites})
	cluster := prometheus.NewCounter(prometheus.CounterOpts{Name: clusterWrites})
	reg.MustRegister(own, cluster)
	load, passive := New(reg, time.Second, 2, About{Mode: "load"}), New(reg, time.Second, 2, About{Mode: "passive"})
	cluster.Add(1_000_000) // an RV, not a count since start
	for _, p := range []*Page{load, passive} {
		p.sample(time.Unix(100, 0))
	}
	own.Add(50)
	cluster.Add(420)
	for _, p := range []*Page{load, passive} {
		p.sample(time.Unix(110, 0))
	}
	for mode, tc := range map[string]struct {
		p    *Page
		want float64
	}{"load": {load, 5}, "passive": {passive, 42}} {
		if r := tc.p.samples[0].Rate; r != nil {
			t.Errorf("%s mode: a rate %v from the first sample alone", mode, *r)
		}
		if r := tc.p.samples[1].Rate; r == nil || *r != tc.want {
			t.Errorf("%s mode: rate %v, want %v writes/s", mode, r, tc.want)
		}
	}
}

// The rate line is taken over the last 30 s, as a Prometheus rate(): a
// counter that steps once per poll does not make it zigzag.
func TestPageRateOverSpan(t *testing.T) {
	reg := prometheus.NewRegistry()
	own := prometheus.NewCounter(prometheus.CounterOpts{Name: exporterWrites})
	reg.MustRegister(own)
	p := New(reg, 5*time.Second, 100, About{Mode: "load"})
	// 10 writes/s, counted in steps of 20 every 2 s, sampled every 5 s:
	// between two samples alone, 40 or 60 writes (8 or 12/s).
	for sec := 0; sec <= 120; sec++ {
		if sec%2 == 0 && sec > 0 {
			own.Add(20)
		}
		if sec%5 == 0 {
			p.sample(time.Unix(int64(1000+sec), 0))
		}
	}
	for i, s := range p.samples[7:] {
		if s.Rate == nil {
			t.Errorf("sample %d: no rate", i+7)
		} else if math.Abs(*s.Rate-10) > 10*0.07 {
			t.Errorf("sample %d: rate %.2f, want 10 writes/s within 7%%", i+7, *s.Rate)
		}
	}
	if n := len(p.writeReadings); n > 8 {
		t.Errorf("%d readings kept, want those of the last 30 s only", n)
	}
}

// Every measured resource's window, shortest first (the fleet's where there
// is one), lower bounds marked, unknown windows last; and what the process
// is: a standby names the holder.
func TestPageResources(t *testing.T) {
	reg := prometheus.NewRegistry()
	labels := []string{"apiserver", "group", "resource"}
	window := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: windowSeconds}, labels)
	lower := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: windowLowerBound}, labels)
	fleet := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: fleetWindow}, []string{"group", "resource"})
	fleetLower := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: fleetLowerBound}, []string{"group", "resource"})
	reg.MustRegister(window, lower, fleet, fleetLower)
	for _, w := range []struct {
		apiserver, group, resource string
		seconds, lower             float64
	}{
		{"a:6443", "", "configmaps", 80, 0}, {"b:6443", "", "configmaps", 90, 0},
		{"a:6443", "", "pods", 30, 0}, {"b:6443", "", "pods", 20, 0},
		{"a:6443", "coordination.k8s.io", "leases", 600, 1},
		{"a:6443", "example.com", "widgets", nan(), nan()},
	} {
		window.WithLabelValues(w.apiserver, w.group, w.resource).Set(w.seconds)
		lower.WithLabelValues(w.apiserver, w.group, w.resource).Set(w.lower)
	}
	fleet.WithLabelValues("", "configmaps").Set(80)
	fleetLower.WithLabelValues("", "configmaps").Set(0)
	p := New(reg, time.Second, 1, About{Mode: "passive", Version: "1.2.3", Role: func() (string, string) { return "standby", "pod-b_x1" }})
	p.sample(time.Unix(100, 0))
	if s := p.samples[0]; s.Fleet == nil || *s.Fleet != 80 {
		t.Errorf("sampled fleet window %v, want the ConfigMaps' 80 s", s.Fleet)
	}

	rec := httptest.NewRecorder()
	p.Handler("/m").ServeHTTP(rec, httptest.NewRequest("GET", "/status.json", nil))
	var got struct {
		About struct {
			Mode, Version, Role, Holder string
		}
		Resources []Resource
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if a := got.About; a.Mode != "passive" || a.Version != "1.2.3" || a.Role != "standby" || a.Holder != "pod-b_x1" {
		t.Errorf("about %+v", a)
	}
	var order []string
	for _, r := range got.Resources {
		order = append(order, r.Resource)
	}
	if want := "pods configmaps leases widgets"; strings.Join(order, " ") != want {
		t.Errorf("resources in the order %v, want %s (shortest first, unknown last)", order, want)
	}
	if len(got.Resources) == 4 {
		pods, cms, leases, widgets := got.Resources[0], got.Resources[1], got.Resources[2], got.Resources[3]
		if pods.Fleet != nil || pods.APIServers["b:6443"].Seconds != 20 || len(pods.APIServers) != 2 {
			t.Errorf("pods %+v: want no fleet window, 20 s on b", pods)
		}
		if cms.Fleet == nil || cms.Fleet.Seconds != 80 || cms.Fleet.Lower {
			t.Errorf("configmaps' fleet window %+v, want 80 s exact", cms.Fleet)
		}
		if w := leases.APIServers["a:6443"]; w.Seconds != 600 || !w.Lower || leases.Group != "coordination.k8s.io" {
			t.Errorf("leases %+v: want at least 600 s on a", leases)
		}
		if len(widgets.APIServers) != 0 {
			t.Errorf("widgets %+v: an unknown window is no window", widgets)
		}
	}
}

// twoColumns is a ColumnCollector of a plotted family and another.
type twoColumns struct{ plotted, other *prometheus.Desc }

func (c twoColumns) Describe(ch chan<- *prometheus.Desc) { ch <- c.plotted; ch <- c.other }
func (c twoColumns) Collect(ch chan<- prometheus.Metric) { c.CollectColumns(ch, nil) }
func (c twoColumns) CollectColumns(ch chan<- prometheus.Metric, keep func(*prometheus.Desc) bool) {
	for _, d := range []*prometheus.Desc{c.plotted, c.other} {
		if keep == nil || keep(d) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, 1, "pods")
		}
	}
}

// A ColumnCollector's families the page does not plot are not collected
// for it at all; /metrics has every family; unregistering finds both.
func TestTeeColumns(t *testing.T) {
	reg, page := prometheus.NewRegistry(), prometheus.NewPedanticRegistry()
	c := twoColumns{
		plotted: prometheus.NewDesc(windowSeconds, "w", []string{"resource"}, nil),
		other:   prometheus.NewDesc("watchcache_window_resource_versions", "v", []string{"resource"}, nil),
	}
	tee := Tee(reg, page)
	tee.MustRegister(c)
	count := func(g prometheus.Gatherer) int {
		fams, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range fams {
			n += len(f.GetMetric())
		}
		return n
	}
	if p, m := count(page), count(reg); p != 1 || m != 2 {
		t.Errorf("page %d series, /metrics %d: want 1 and 2", p, m)
	}
	if !tee.Unregister(c) || count(page) != 0 || count(reg) != 0 {
		t.Errorf("after Unregister: page %d series, /metrics %d", count(page), count(reg))
	}
}
