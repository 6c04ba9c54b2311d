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
// later, are refused with 410 exactly when their RV is below the exporter's
// compacted RV; a paginated LIST of the largest resource is timed; then
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
		m := exp.Scrape(t)
		s := sample{at: time.Now(), etcd: etcdRevision(t, c.EtcdMetrics), eventsEtcd: etcdRevision(t, c.EventsEtcdMetrics)}
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

	// Phase 1: compaction every interval.
	tokens := newTokens(admin)
	var samples []sample
	start := time.Now()
	for tick := 0; ; tick++ {
		time.Sleep(time.Second)
		s := look()
		samples = append(samples, s)
		if tick%5 == 0 {
			tokens.take(t, ctx)
		}
		tokens.use(t, ctx, s)
		if distinct(samples, func(s sample) float64 { return s.etcd }) >= 3 && distinct(samples, func(s sample) float64 { return s.eventsEtcd }) >= 3 &&
			s.cm == s.etcd && s.ev == s.eventsEtcd && tokens.decided() {
			break
		}
		if time.Since(start) > 4*time.Minute {
			t.Fatalf("after %s: etcd compacted to %v, events' etcd to %v; exporter says %v, %v; tokens %s",
				time.Since(start).Round(time.Second), values(samples, func(s sample) float64 { return s.etcd }),
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
	stopAt := last.lastCM + 3*last.intervalCM + 75 // the alert's 3 intervals, its 1m for, and a scrape
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
// run scraped, one sample every 5 s, their timestamps moved to promtool's
// clock: quiet while etcd compacted, firing for both etcds at the end.
func checkStoppedAlert(t *testing.T, on, off []sample) {
	t.Helper()
	all := append(slices.Clone(on), off...)
	t0 := all[0].at
	const step = 5 * time.Second
	var picked []sample
	for _, s := range all {
		if len(picked) == 0 || s.at.Sub(picked[len(picked)-1].at) >= step-500*time.Millisecond {
			picked = append(picked, s)
		}
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
	evalOn := time.Duration(slices.IndexFunc(picked, func(s sample) bool { return !s.at.Before(off[0].at) })-1) * step
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
// every few seconds and each used once, after a delay from a cycle that
// lands both before and after the compactions that pass it.
type tokens struct {
	admin   kubernetes.Interface
	taken   []*token
	pending []*token // used, waiting for the exporter's next checks
	// The exporter's compacted RV of each kind, and since when it says so.
	said  map[string]float64
	since map[string]time.Time
}

// snapshotLag bounds how long after etcd's compaction a ConfigMaps'
// continue token below it may still be served, from the watch cache's
// snapshots: the cache trims them every 15 s (the cacher's compactor), and
// the exporter sees the compaction within a check.
const snapshotLag = 15*time.Second + checkEvery + time.Second

type token struct {
	kind     string // configmaps or events
	cont     string // the continue token
	rv       float64
	taken    time.Time
	useAfter time.Duration
	// When used: the exporter's compacted RV just before, the answer, and
	// when to read the exporter again.
	compacted float64
	said      time.Duration // how long the exporter had said so
	refused   bool
	used      time.Time
	// snapshot: accepted below the compacted RV, from the watch cache's
	// snapshots, within snapshotLag of the compaction.
	snapshot bool
	// decided: the exporter's compacted RV was the same after as before,
	// so the answer is compared with it; ambiguous: it moved meanwhile.
	decided, ambiguous bool
}

var delays = []time.Duration{10 * time.Second, 35 * time.Second, 60 * time.Second, 80 * time.Second}

func newTokens(admin kubernetes.Interface) *tokens {
	return &tokens{admin: admin, said: map[string]float64{}, since: map[string]time.Time{}}
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
		ts.taken = append(ts.taken, &token{kind: kind, cont: l.Continue, rv: rv, taken: time.Now(), useAfter: delays[len(ts.taken)/2%len(delays)]})
	}
}

// use uses the tokens that are due, and decides those used two checks ago
// with s, the exporter's compacted RVs now.
func (ts *tokens) use(t *testing.T, ctx context.Context, s sample) {
	t.Helper()
	compacted := func(kind string) float64 {
		if kind == "events" {
			return s.ev
		}
		return s.cm
	}
	for _, kind := range []string{"configmaps", "events"} {
		if c, old := compacted(kind), ts.said[kind]; c != old || ts.since[kind].IsZero() {
			ts.said[kind], ts.since[kind] = c, s.at
		}
	}
	ts.pending = slices.DeleteFunc(ts.pending, func(k *token) bool {
		if time.Since(k.used) < 2*checkEvery+time.Second {
			return false
		}
		if compacted(k.kind) != k.compacted {
			k.ambiguous = true
			return true
		}
		if k.kind == "configmaps" && !k.refused && k.rv < k.compacted && k.said < snapshotLag {
			k.snapshot = true
			return true
		}
		k.decided = true
		if want := k.rv < k.compacted; k.refused != want {
			t.Errorf("%s continue token of RV %v, used %s after it was taken: refused %v, but the exporter's compacted RV was %v",
				k.kind, k.rv, k.used.Sub(k.taken).Round(time.Second), k.refused, k.compacted)
		}
		return true
	})
	for _, k := range ts.taken {
		if !k.used.IsZero() || time.Since(k.taken) < k.useAfter {
			continue
		}
		k.compacted, k.said = compacted(k.kind), time.Since(ts.since[k.kind])
		if math.IsNaN(k.compacted) {
			continue
		}
		_, err := ts.list(ctx, k.kind, k.cont)
		switch {
		case apierrors.IsResourceExpired(err):
			k.refused = true
		case err != nil:
			t.Fatalf("%s continue token: %v", k.kind, err)
		}
		k.used = time.Now()
		ts.pending = append(ts.pending, k)
	}
}

// decided says whether a token of each kind was decided refused and one
// accepted.
func (ts *tokens) decided() bool {
	for _, kind := range []string{"configmaps", "events"} {
		for _, refused := range []bool{false, true} {
			if !slices.ContainsFunc(ts.taken, func(k *token) bool { return k.kind == kind && k.decided && k.refused == refused }) {
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
			fmt.Fprintf(&b, "[%s RV %v after %s: refused %v, compacted %v (said for %s), decided %v] ", k.kind, k.rv, k.used.Sub(k.taken).Round(time.Second), k.refused, k.compacted, k.said.Round(time.Second), k.decided)
		}
	}
	return b.String()
}

func (ts *tokens) report(t *testing.T) {
	t.Helper()
	for _, kind := range []string{"configmaps", "events"} {
		var refused, accepted, ambiguous, snapshot int
		for _, k := range ts.taken {
			switch {
			case k.kind != kind:
			case k.ambiguous:
				ambiguous++
			case k.snapshot:
				snapshot++
			case k.decided && k.refused:
				refused++
			case k.decided:
				accepted++
			}
		}
		t.Logf("%s continue tokens: %d refused, %d accepted, each as the exporter's compacted RV said; %d used while it moved; %d below it served from the watch cache's snapshots within %s of the compaction",
			kind, refused, accepted, ambiguous, snapshot, snapshotLag)
	}
	t.Logf("tokens: %s", ts)
}
