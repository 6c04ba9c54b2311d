package compaction_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/watchcache/watchcache-exporter/compaction"
	"github.com/watchcache/watchcache-exporter/test/exportertest"
	"github.com/watchcache/watchcache-exporter/test/promtest"
	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

const (
	ns = "compaction-test"
	// The apiservers compact every interval instead of 5 minutes, so that
	// three compactions happen within the test; the exporter checks every
	// checkEvery.
	interval   = 30 * time.Second
	checkEvery = 2 * time.Second
	// Events, in an etcd of their own: more than two pages of them, so
	// that they are the largest resource and their timed LIST pages.
	events = 2*compaction.PageSize + 1
)

// sample is one look at etcd's compaction revisions and the exporter's.
type sample struct {
	at                           time.Time
	etcd, eventsEtcd             float64 // etcd_debugging_mvcc_compact_revision of each
	cm, ev                       float64 // the exporter's compacted RV of configmaps, events
	windowCM, windowEv           float64
	lowerCM                      float64
	lastCM, lastEv               float64 // last compaction timestamps
	intervalCM, intervalEv       float64
	compactionsCM, compactionsEv float64
}

// TestListHorizon: against etcd's own compaction revisions, for the main
// etcd and an events etcd (--etcd-servers-overrides), over at least three
// compactions each; real continue tokens, taken every few seconds and used
// after compactions the test sees, are refused with 410 exactly when their
// RV is below the exporter's compacted RV; a paginated LIST of the largest resource is timed; then
// compaction is turned off (--etcd-compaction-interval=0): the horizon
// grows, and WatchCacheEtcdCompactionStopped fires on the series this run
// produced (promtool, every Prometheus version tested).
func TestListHorizon(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{EventsEtcd: true,
		APIServerFlags: []string{"--etcd-compaction-interval=" + interval.String()}})
	ctx := t.Context()
	cfg := c.AdminConfig()
	cfg.QPS = -1
	admin := kubernetes.NewForConfigOrDie(cfg)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createEvents(t, admin)

	exp := exportertest.Start(t, c.AdminConfig(), "--namespace="+ns, "--load.rate=20", "--resources=events",
		"--resources.interval=2s", "--compaction.interval="+checkEvery.String(), "--compaction.list-interval=1m")
	exporterStart := time.Now()
	exp.WaitReady(t, time.Minute)

	// Events move their etcd's revisions on.
	writeCtx, stopWrites := context.WithCancel(ctx)
	var eventWrites, eventErrors atomic.Int64
	var wg sync.WaitGroup
	defer func() { stopWrites(); wg.Wait() }()
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; writeCtx.Err() == nil; i++ {
			<-tick.C
			_, err := admin.CoreV1().Events(ns).Patch(writeCtx, fmt.Sprintf("event-%d", i%events), types.MergePatchType,
				fmt.Appendf(nil, `{"count":%d}`, i+2), metav1.PatchOptions{})
			if err == nil {
				eventWrites.Add(1)
			} else {
				eventErrors.Add(1) // while the apiserver restarts
			}
		}
	})

	look := func() sample {
		// Timed by the scrape, not by the etcd reads after it, which take
		// seconds on a busy machine.
		t0 := time.Now()
		m := exp.Scrape(t)
		s := sample{at: t0.Add(time.Since(t0) / 2), etcd: etcdRevision(t, c.EtcdMetrics), eventsEtcd: etcdRevision(t, c.EventsEtcdMetrics)}
		get := func(name, resource string) float64 {
			v, err := m.Get("watchcache_"+name, "resource", resource)
			if err != nil {
				return math.NaN() // not there yet: events before their etcd is known
			}
			return v
		}
		s.cm, s.ev = get("compacted_resource_version", "configmaps"), get("compacted_resource_version", "events")
		s.windowCM, s.windowEv = get("compaction_window_seconds", "configmaps"), get("compaction_window_seconds", "events")
		s.lowerCM = get("compaction_window_lower_bound", "configmaps")
		s.lastCM, s.lastEv = get("last_compaction_timestamp_seconds", "configmaps"), get("last_compaction_timestamp_seconds", "events")
		s.intervalCM, s.intervalEv = get("compaction_interval_seconds", "configmaps"), get("compaction_interval_seconds", "events")
		s.compactionsCM, s.compactionsEv = get("compactions_total", "configmaps"), get("compactions_total", "events")
		return s
	}

	// Phase 1: compaction every interval, until three compactions of each
	// etcd were seen and the tokens decided: ended by etcd's compactions,
	// not by the clock, which a busy machine stretches.
	tokens := newTokens(admin, func(kind string) float64 {
		if kind == "events" {
			return etcdRevision(t, c.EventsEtcdMetrics)
		}
		return etcdRevision(t, c.EtcdMetrics)
	})
	const maxCompactions = 8
	var samples []sample
	start := time.Now()
	lastCompaction := start
	for tick := 0; ; tick++ {
		time.Sleep(time.Second)
		s := look()
		if len(samples) > 0 && s.etcd != samples[len(samples)-1].etcd {
			lastCompaction = s.at
		}
		samples = append(samples, s)
		if tick%5 == 0 {
			tokens.take(t, ctx)
		}
		tokens.use(t, ctx, s)
		seen := distinct(samples, func(s sample) float64 { return s.etcd })
		if seen >= 3 && distinct(samples, func(s sample) float64 { return s.eventsEtcd }) >= 3 &&
			s.cm == s.etcd && s.ev == s.eventsEtcd && tokens.decided() {
			break
		}
		if seen >= maxCompactions || s.at.Sub(lastCompaction) > 5*interval {
			t.Fatalf("after %s and %d compactions of the main etcd (the last %s ago): etcd compacted to %v, events' etcd to %v; exporter says %v, %v; tokens %s",
				time.Since(start).Round(time.Second), seen, s.at.Sub(lastCompaction).Round(time.Second),
				values(samples, func(s sample) float64 { return s.etcd }),
				values(samples, func(s sample) float64 { return s.eventsEtcd }), s.cm, s.ev, tokens)
		}
	}
	phase1 := len(samples)
	t.Logf("phase 1, %s: etcd compacted to %v, the exporter said %v; events' etcd to %v, the exporter said %v",
		time.Since(start).Round(time.Second),
		values(samples, func(s sample) float64 { return s.etcd }), values(samples, func(s sample) float64 { return s.cm }),
		values(samples, func(s sample) float64 { return s.eventsEtcd }), values(samples, func(s sample) float64 { return s.ev }))
	checkFollows(t, "configmaps", samples, func(s sample) (float64, float64) { return s.etcd, s.cm })
	checkFollows(t, "events", samples, func(s sample) (float64, float64) { return s.eventsEtcd, s.ev })
	last := samples[len(samples)-1]
	for _, x := range []struct {
		name                   string
		compactions, intervalS float64
	}{{"configmaps", last.compactionsCM, last.intervalCM}, {"events", last.compactionsEv, last.intervalEv}} {
		if x.compactions < 2 || math.Abs(x.intervalS-interval.Seconds()) > 2*checkEvery.Seconds()+1 {
			t.Errorf("%s: %v compactions seen, %v s apart; want at least 2, %s apart (within 2 checks)", x.name, x.compactions, x.intervalS, interval)
		}
	}
	// Past its first compaction, the horizon saws between about one and
	// two intervals (the apiserver compacts to the revision it wrote one
	// interval before), plus the exporter's lag in seeing one.
	for _, s := range samples {
		if s.cm > 0 && (s.windowCM < interval.Seconds()-1 || s.windowCM > 2*interval.Seconds()+15+2*checkEvery.Seconds() || s.lowerCM != 0) {
			t.Errorf("at %s: the configmaps' LIST horizon %v s (lower bound %v), want between %s and twice that plus the lag", s.at.Sub(start).Round(time.Second), s.windowCM, s.lowerCM, interval)
		}
	}
	tokens.report(t)
	probes := exp.Scrape(t).Value(t, "watchcache_compaction_probes_total")
	t.Logf("cost: %v LISTs at exact RVs in %s from the exporter's start, for 2 etcds checked every %s and %v + %v compactions seen",
		probes, time.Since(exporterStart).Round(time.Second), checkEvery, last.compactionsCM, last.compactionsEv)

	// The timed paginated LIST: the events, three pages.
	exp.WaitFor(t, time.Minute, "a timed paginated LIST of events", func(m exportertest.Metrics) bool {
		pages, err := m.Get("watchcache_paginated_list_pages", "resource", "events")
		return err == nil && pages > 0
	})
	m := exp.Scrape(t)
	list, err := admin.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantPages := (len(list.Items) + compaction.PageSize - 1) / compaction.PageSize
	pages, seconds := m.Value(t, "watchcache_paginated_list_pages", "resource", "events"), m.Value(t, "watchcache_paginated_list_seconds", "resource", "events")
	t.Logf("paginated LIST of %d events: %v pages in %.3f s", len(list.Items), pages, seconds)
	if pages != float64(wantPages) || !(seconds > 0) {
		t.Errorf("paginated LIST of events: %v pages in %v s, want %d pages (%d events)", pages, seconds, wantPages, len(list.Items))
	}

	// Phase 2: compaction off.
	off := time.Now()
	if err := c.APIServer().RestartWith(ctx, "--etcd-compaction-interval=0"); err != nil {
		t.Fatal(err)
	}
	stopAt := last.lastCM + 3*last.intervalCM + 85 // the alert's 3 intervals, its 1m for, two evaluations and a scrape
	for float64(time.Now().Unix()) < stopAt || time.Since(off) < 2*interval {
		time.Sleep(time.Second)
		samples = append(samples, look())
	}
	end := samples[len(samples)-1]
	stopWrites()
	t.Logf("phase 2, %s without compaction: compacted RVs %v (etcd %v), %v (events' etcd %v); horizons %.1f s, %.1f s; %d event patches in all (%d failed)",
		time.Since(off).Round(time.Second), end.cm, end.etcd, end.ev, end.eventsEtcd, end.windowCM, end.windowEv, eventWrites.Load(), eventErrors.Load())
	if end.etcd != last.etcd || end.cm != last.cm || end.ev != last.ev || end.compactionsCM != last.compactionsCM {
		t.Errorf("without compaction: etcd %v -> %v, exporter %v -> %v, events %v -> %v, compactions %v -> %v; want no change",
			last.etcd, end.etcd, last.cm, end.cm, last.ev, end.ev, last.compactionsCM, end.compactionsCM)
	}
	grown, elapsed := end.windowCM-last.windowCM, end.at.Sub(last.at).Seconds()
	if math.Abs(grown-elapsed) > 3 {
		t.Errorf("without compaction the horizon grew by %.1f s in %.1f s, want as much", grown, elapsed)
	}
	checkStoppedAlert(t, samples[:phase1], samples[phase1:])
}

func createEvents(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	errs := make(chan error, 8)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < events; i = int(next.Add(1)) - 1 {
				_, err := admin.CoreV1().Events(ns).Create(t.Context(), &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("event-%d", i)},
					InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "p"},
					Reason:         "Test", Message: "written by the test", Type: corev1.EventTypeNormal}, metav1.CreateOptions{})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func etcdRevision(t *testing.T, read func(context.Context) (map[string]*dto.MetricFamily, error)) float64 {
	t.Helper()
	fams, err := read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	v, err := testcluster.Value(fams, "etcd_debugging_mvcc_compact_revision", nil)
	if err != nil {
		t.Fatal(err)
	}
	return max(v, 0) // -1 before the first compaction; the exporter says 0
}

// checkFollows: the exporter reports each of etcd's compaction revisions
// (0 before the first), and at each moment etcd's, or the one before (the
// exporter sees a compaction a check after it, and the
// watch cache's snapshots, trimmed every 15 s, serve the LIST meanwhile).
func checkFollows(t *testing.T, name string, samples []sample, pair func(sample) (etcd, exporter float64)) {
	t.Helper()
	var seen []float64 // etcd's, in order
	for i, s := range samples {
		e, x := pair(s)
		if len(seen) == 0 || seen[len(seen)-1] != e {
			seen = append(seen, e)
		}
		if math.IsNaN(x) {
			continue
		}
		if x != e && (len(seen) < 2 || x != seen[len(seen)-2]) {
			t.Errorf("%s at sample %d: the exporter says %v, etcd compacted to %v (so far %v)", name, i, x, e, seen)
		}
	}
	for _, v := range seen {
		if !slices.ContainsFunc(samples, func(s sample) bool { _, x := pair(s); return x == v }) {
			t.Errorf("%s: etcd compacted to %v, which the exporter never said (etcd: %v)", name, v, seen)
		}
	}
}

func distinct(samples []sample, f func(sample) float64) int { return len(values(samples, f)) }

// values are f's values in order, each once, 0 left out.
func values(samples []sample, f func(sample) float64) []float64 {
	var out []float64
	for _, s := range samples {
		if v := f(s); v != 0 && !math.IsNaN(v) && (len(out) == 0 || out[len(out)-1] != v) {
			out = append(out, v)
		}
	}
	return out
}

// checkStoppedAlert runs WatchCacheEtcdCompactionStopped on the series this
// run scraped, as a scrape every 5 s of the run's clock would have read them
// (the newest sample at each step: the samples are further apart than a
// second on a busy machine, and one every 5 s of them would squeeze the
// run into less of promtool's time than it took), their timestamps moved
// to promtool's clock: quiet while etcd compacted, firing for both etcds at
// the end.
func checkStoppedAlert(t *testing.T, on, off []sample) {
	t.Helper()
	all := append(slices.Clone(on), off...)
	t0 := all[0].at
	const step = 5 * time.Second
	var picked []sample
	for at := t0; !at.After(all[len(all)-1].at); at = at.Add(step) {
		newest, _ := slices.BinarySearchFunc(all, at, func(s sample, at time.Time) int {
			if s.at.After(at) {
				return 1
			}
			return -1
		})
		picked = append(picked, all[newest-1])
	}
	series := func(name, resource string, f func(sample) float64, shift bool) string {
		vals := make([]string, len(picked))
		for i, s := range picked {
			v := f(s)
			switch {
			case math.IsNaN(v):
				vals[i] = "_"
			case shift: // a Unix time, to promtool's clock, where t0 is 0
				vals[i] = fmt.Sprintf("%.3f", v-float64(t0.UnixNano())/1e9)
			default:
				vals[i] = fmt.Sprintf("%g", v)
			}
		}
		return fmt.Sprintf("      - series: '%s{job=\"watchcache-exporter\",instance=\"e:9890\",group=\"\",resource=\"%s\"}'\n        values: '%s'\n",
			name, resource, strings.Join(vals, " "))
	}
	var in strings.Builder
	in.WriteString(series("watchcache_last_compaction_timestamp_seconds", "configmaps", func(s sample) float64 { return s.lastCM }, true))
	in.WriteString(series("watchcache_last_compaction_timestamp_seconds", "events", func(s sample) float64 { return s.lastEv }, true))
	in.WriteString(series("watchcache_compaction_interval_seconds", "configmaps", func(s sample) float64 { return s.intervalCM }, false))
	in.WriteString(series("watchcache_compaction_interval_seconds", "events", func(s sample) float64 { return s.intervalEv }, false))
	// Evaluated at the last sample taken with compaction on, and at the end.
	evalOn := (off[0].at.Sub(t0) - time.Nanosecond) / step * step // the last step before compaction was off
	evalEnd := time.Duration(len(picked)-1) * step
	firing := func(resource string) string {
		return fmt.Sprintf("          - labels: 'ALERTS{alertname=\"WatchCacheEtcdCompactionStopped\",alertstate=\"firing\",job=\"watchcache-exporter\",resource=\"%s\",severity=\"warning\"}'\n            value: 1\n", resource)
	}
	root, err := testcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	test := fmt.Sprintf(`rule_files: [%q]
evaluation_interval: 5s
tests:
  - interval: 5s
    input_series:
%s    promql_expr_test:
      - expr: 'ALERTS{alertname="WatchCacheEtcdCompactionStopped"}'
        eval_time: %s
        exp_samples: []
      - expr: 'ALERTS{alertname="WatchCacheEtcdCompactionStopped",alertstate="firing"}'
        eval_time: %s
        exp_samples:
%s%s`, filepath.Join(root, "monitoring", "rules.yml"), in.String(), evalOn, evalEnd, firing("configmaps"), firing("events"))
	path := filepath.Join(t.TempDir(), "stopped_test.yml")
	if err := os.WriteFile(path, []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, bin := range promtest.Promtools(t) {
		if out, err := exec.Command(bin.Path, "test", "rules", path).CombinedOutput(); err != nil {
			t.Errorf("promtool %s on this run's series: %v\n%s\n%s", bin.Name, err, out, test)
		}
	}
}

// tokens are continue tokens of the ConfigMaps and of the events, taken
// every few seconds and used at moments chosen from the compactions the
// test sees: after each compaction that etcd and the exporter agree on, the
// newest token below it (it must be refused) and the oldest at or above it
// (it must be served), each of a kind once. Etcd's compaction revision,
// read before and after the use, decides its fate; a use that a compaction
// overtook is tried again after the next.
type tokens struct {
	admin kubernetes.Interface
	// etcd reads the compaction revision of the etcd that holds a kind.
	etcd  func(kind string) float64
	taken []*token
	// The exporter's compacted RV of each kind, and since when it says so.
	said  map[string]float64
	since map[string]time.Time
	// tried: the compacted RV after which a token of each kind and
	// expected fate was used.
	tried map[string]float64
}

// snapshotLag bounds how long after etcd's compaction a ConfigMaps'
// continue token below it may still be served, from the watch cache's
// snapshots: the cache trims them every 15 s (the cacher's compactor), and
// the exporter sees the compaction within a check. A token below the
// compaction is used no sooner.
const snapshotLag = 15*time.Second + checkEvery + time.Second

type token struct {
	kind  string // configmaps or events
	cont  string // the continue token
	rv    float64
	taken time.Time
	// When used: the exporter's compacted RV (etcd's too), the answer, and
	// whether etcd compacted again during the use.
	compacted  float64
	said       time.Duration // how long the exporter had said so
	refused    bool
	used       time.Time
	overtaken  bool
	checkedRVs bool // decided: refused exactly when rv < compacted
}

func newTokens(admin kubernetes.Interface, etcd func(kind string) float64) *tokens {
	return &tokens{admin: admin, etcd: etcd, said: map[string]float64{}, since: map[string]time.Time{}, tried: map[string]float64{}}
}

func (ts *tokens) list(ctx context.Context, kind, cont string) (metav1.ListMeta, error) {
	opts := metav1.ListOptions{Limit: 1, Continue: cont}
	if kind == "events" {
		l, err := ts.admin.CoreV1().Events(ns).List(ctx, opts)
		if err != nil {
			return metav1.ListMeta{}, err
		}
		return l.ListMeta, nil
	}
	l, err := ts.admin.CoreV1().ConfigMaps(ns).List(ctx, opts)
	if err != nil {
		return metav1.ListMeta{}, err
	}
	return l.ListMeta, nil
}

func (ts *tokens) take(t *testing.T, ctx context.Context) {
	t.Helper()
	for _, kind := range []string{"configmaps", "events"} {
		l, err := ts.list(ctx, kind, "")
		if err != nil {
			t.Fatal(err)
		}
		if l.Continue == "" {
			t.Fatalf("a LIST of %s with limit=1 gave no continue token", kind)
		}
		var rv float64
		if _, err := fmt.Sscan(l.ResourceVersion, &rv); err != nil {
			t.Fatal(err)
		}
		ts.taken = append(ts.taken, &token{kind: kind, cont: l.Continue, rv: rv, taken: time.Now()})
	}
}

// use uses, after each compaction s shows etcd and the exporter agreeing
// on, a token of each kind and expected fate that is due.
func (ts *tokens) use(t *testing.T, ctx context.Context, s sample) {
	t.Helper()
	for _, kind := range []string{"configmaps", "events"} {
		c, e := s.cm, s.etcd
		if kind == "events" {
			c, e = s.ev, s.eventsEtcd
		}
		if c != ts.said[kind] || ts.since[kind].IsZero() {
			ts.said[kind], ts.since[kind] = c, s.at
		}
		if math.IsNaN(c) || c == 0 || c != e {
			continue
		}
		said := s.at.Sub(ts.since[kind])
		for _, below := range []bool{true, false} {
			key := fmt.Sprintf("%s/%v", kind, below)
			if ts.tried[key] == c || below && kind == "configmaps" && said < snapshotLag {
				continue
			}
			k := ts.pick(kind, c, below)
			if k == nil {
				continue
			}
			ts.tried[key] = c
			k.compacted, k.said = c, said
			_, err := ts.list(ctx, k.kind, k.cont)
			switch {
			case apierrors.IsResourceExpired(err):
				k.refused = true
			case err != nil:
				t.Fatalf("%s continue token: %v", k.kind, err)
			}
			k.used = time.Now()
			if after := ts.etcd(kind); after != c {
				k.overtaken = true // tried again after the next compaction
				ts.tried[key] = 0
				continue
			}
			k.checkedRVs = true
			if k.refused != below {
				t.Errorf("%s continue token of RV %v, used %s after it was taken: refused %v, but the exporter's compacted RV was %v (said for %s, as etcd's)",
					k.kind, k.rv, k.used.Sub(k.taken).Round(time.Second), k.refused, k.compacted, k.said.Round(time.Second))
			}
		}
	}
}

// pick is the unused token of kind nearest below c (below) or nearest at
// or above it, or nil.
func (ts *tokens) pick(kind string, c float64, below bool) *token {
	var best *token
	for _, k := range ts.taken {
		if k.kind != kind || !k.used.IsZero() || (k.rv < c) != below {
			continue
		}
		if best == nil || below && k.rv > best.rv || !below && k.rv < best.rv {
			best = k
		}
	}
	return best
}

// decided says whether a token of each kind was decided refused and one
// accepted.
func (ts *tokens) decided() bool {
	for _, kind := range []string{"configmaps", "events"} {
		for _, refused := range []bool{false, true} {
			if !slices.ContainsFunc(ts.taken, func(k *token) bool { return k.kind == kind && k.checkedRVs && k.refused == refused }) {
				return false
			}
		}
	}
	return true
}

func (ts *tokens) String() string {
	var b strings.Builder
	for _, k := range ts.taken {
		if !k.used.IsZero() {
			fmt.Fprintf(&b, "[%s RV %v after %s: refused %v, compacted %v (said for %s), overtaken %v] ", k.kind, k.rv, k.used.Sub(k.taken).Round(time.Second), k.refused, k.compacted, k.said.Round(time.Second), k.overtaken)
		}
	}
	return b.String()
}

func (ts *tokens) report(t *testing.T) {
	t.Helper()
	for _, kind := range []string{"configmaps", "events"} {
		var refused, accepted, overtaken int
		for _, k := range ts.taken {
			switch {
			case k.kind != kind:
			case k.overtaken:
				overtaken++
			case k.checkedRVs && k.refused:
				refused++
			case k.checkedRVs:
				accepted++
			}
		}
		t.Logf("%s continue tokens: %d refused, %d accepted, each as the exporter's compacted RV said; %d overtaken by a compaction while used",
			kind, refused, accepted, overtaken)
	}
	t.Logf("tokens: %s", ts)
}
