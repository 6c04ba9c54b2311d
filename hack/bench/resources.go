package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/watchcache/watchcache-exporter/internal/gathered"
	"github.com/watchcache/watchcache-exporter/resources"
	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

// resourcesDur is how long each exporter of resourcesCost is measured.
const resourcesDur = 2 * time.Minute

// resourcesCost measures what --resources=all adds: requests per second to
// the apiserver by verb (from its apiserver_request_total), CPU of the
// apiserver, etcd and the exporter, and the exporter's RSS, against a
// passive exporter without --resources over the same time.
func resourcesCost(ctx context.Context, r *report, c *testcluster.Cluster, exe, kubeconfig string) error {
	as := c.APIServers()[:1]
	measure := func(args ...string) (*cost, error) {
		return measureCost(ctx, c, as, exe, kubeconfig, resourcesDur, args...)
	}
	base, err := measure()
	if err != nil {
		return err
	}
	all, err := measure("--resources=all", "--resources.interval=10s")
	if err != nil {
		return err
	}
	ivl := all.interval
	fmt.Fprintf(r, "\n## 6. Every resource's window: what --resources=all costs\n\nTwo passive exporters (`--load.rate=0`) one after the other, each measured over %s (or one probe interval and 10 s, if longer) after a 20 s warm-up: without `--resources`, then with `--resources=all --resources.interval=10s`, which resolved %.0f resources on this apiserver; the default `--resources.budget` (5 requests/s) stretched the interval to %.1f s. Requests are the apiserver's own count (`apiserver_request_total`, every client, so the difference is the exporter's share).\n\n", resourcesDur, all.resources, ivl)
	fmt.Fprintln(r, "| | LIST/s | WATCH/s | all requests/s | apiserver CPU % | etcd CPU % | exporter CPU % | exporter max RSS MiB |")
	fmt.Fprintln(r, "|---|---|---|---|---|---|---|---|")
	row := func(name string, x *cost) {
		fmt.Fprintf(r, "| %s | %.2f | %.2f | %.2f | %.1f | %.1f | %.2f | %.1f |\n", name, x.requests["LIST"], x.requests["WATCH"], x.total(), x.apiserver, x.etcd, x.cpu, x.rss)
	}
	row("passive", base)
	row("passive, --resources=all", all)
	added := map[string]float64{}
	for _, v := range []string{"LIST", "WATCH"} {
		added[v] = all.requests[v] - base.requests[v]
	}
	expect := all.resources / ivl
	fmt.Fprintf(r, "\nAdded by the probes: %.2f LIST/s and %.2f WATCH/s, against %.2f/s each expected (one list with limit=1 and one watch from RV 1 per resource and %.1f s; configmaps' watch is the quiet ConfigMap's probe already), and %.2f WATCH/s more that search etcd's compaction for the resources whose cache is off (events, by default: their window is etcd's compaction, about log2(revisions) watches after each compaction and one per interval otherwise; none before the first compaction); %.1f%% of a core on the apiserver, %.1f%% on etcd, %.2f%% in the exporter, %+.1f MiB of RSS.\n",
		added["LIST"], added["WATCH"], expect, ivl, all.compactions, all.apiserver-base.apiserver, all.etcd-base.etcd, all.cpu-base.cpu, all.rss-base.rss)
	r.target(added["LIST"] <= 1.1*expect && added["WATCH"] <= 1.1*expect+all.compactions,
		"--resources=all: at most one LIST and one WATCH per resource and interval (+10%), besides the compaction search",
		fmt.Sprintf("%.0f resources: %.2f LIST/s, %.2f WATCH/s added (%.2f/s each expected, %.2f/s compaction search)", all.resources, added["LIST"], added["WATCH"], expect, all.compactions))
	return resourcesScale(ctx, r, c, exe, kubeconfig)
}

// scaleDur is how long each exporter of resourcesScale is measured at
// least: the exporters with --resources for one probe interval and 10 s
// if that is longer, so that every resource's probe and count is in.
const scaleDur = time.Minute

// crdResync is the period of the apiserver's CRD informer, whose resync has
// its OpenAPI controller rebuild every CRD's spec (apiextensions-apiserver
// starts its informers with 5 minutes); resyncCPU is what one rebuild took
// at 1000 CRDs, in a CPU profile of the apiserver (pprof, 120 s).
const (
	scrapeEvery = 15 * time.Second
	crdResync   = 5 * time.Minute
	resyncCPU   = 1.86
)

// resourcesScale measures --resources=all at the default budget with 63
// (built-in), 300 and 1000 resources (CRDs added), measuring 1 and 3
// apiservers: the exporter's CPU and RSS, and per apiserver the CPU and the
// requests it adds over a passive exporter without --resources that measures
// the same apiservers.
func resourcesScale(ctx context.Context, r *report, c *testcluster.Cluster, exe, kubeconfig string) error {
	for len(c.APIServers()) < 3 {
		if _, err := c.AddAPIServer(ctx); err != nil {
			return err
		}
	}
	fmt.Fprintf(r, "\n### Cost as the resources grow\n\n`--resources=all` at the default budget (5 requests/s per apiserver, `--resources.interval=10s`), after a 20 s warm-up, scraped every %s as Prometheus would, against the mean of two passive exporters without `--resources` measuring the same apiservers (`--apiservers=` a list), one before and one after it. Without CRDs each of the three is measured over %s, or one probe interval and 10 s if longer. With CRDs, the exporter with `--resources` is measured over one probe interval and 10 s rounded up to whole multiples of %s, and each base over %s: every %s the apiserver's OpenAPI controller rebuilds the spec of every CRD (its informer's resync), %.1f s of CPU at 1000 CRDs in one CPU profile, which a window that holds one more or one fewer of them than its base would count as the exporter's. Resources are CRDs added to the built-in ones, each with no objects, and measured a minute after the last was served. Apiserver figures are per apiserver: the mean over those measured of the CPU and requests (`apiserver_request_total`) that `--resources=all` adds. The CPU added is a difference between runs on a busy 2-core machine: the two base runs' difference is its noise, and the requests added, counted by the apiserver itself, are the exact figure.\n\n", scrapeEvery, scaleDur, crdResync, crdResync, crdResync, resyncCPU)
	fmt.Fprintln(r, "| resources | apiservers | interval s | exporter CPU % | exporter max RSS MiB | apiserver CPU % added | the base runs' difference (noise) | requests/s added per apiserver |")
	fmt.Fprintln(r, "|---|---|---|---|---|---|---|---|")
	cfg := c.AdminConfig()
	cfg.QPS = -1
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	maxCPU, maxRSS := 0.0, 0.0
	made := 0
	for _, size := range []int{0, 300, 1000} {
		if size > 0 {
			n, err := servedResources(ctx, c)
			if err != nil {
				return err
			}
			for ; n < size; n, made = n+1, made+1 {
				if err := createCRD(ctx, dyn, made); err != nil {
					return err
				}
			}
			if err := waitResources(ctx, c, size); err != nil {
				return fmt.Errorf("%d resources: %w (the largest this apiserver held)", size, err)
			}
			// An apiserver builds a CRD's storage and watch cache at the
			// first request for it: the first round of probes would
			// measure that, once, rather than the probes.
			if err := warmCRDs(ctx, c, made); err != nil {
				return err
			}
			sleep(ctx, time.Minute) // the apiserver's OpenAPI and controllers catch up with the new CRDs
		}
		served, err := servedResources(ctx, c)
		if err != nil {
			return err
		}
		// The apiserver's own background work drifts (its controllers,
		// OpenAPI after CRDs change): passive exporters without --resources
		// are measured before and after the one with it, for as long as it
		// (one probe interval at the default budget, and 10 s); their mean
		// is the base, their difference the noise. With CRDs, every window
		// holds whole periods of their resync, whose rebuild of every CRD's
		// OpenAPI spec is the largest lump of the apiserver's background.
		dur := max(scaleDur, resources.Pace{Interval: 10 * time.Second, Budget: 5}.For(served)+10*time.Second)
		baseDur := dur
		if made > 0 {
			dur = (dur + crdResync - 1) / crdResync * crdResync
			baseDur = crdResync
		}
		for _, n := range []int{1, 3} {
			as := c.APIServers()[:n]
			urls := make([]string, n)
			for i, a := range as {
				urls[i] = a.URL()
			}
			list := "--apiservers=" + strings.Join(urls, ",")
			before, err := measureCost(ctx, c, as, exe, kubeconfig, baseDur, list)
			if err != nil {
				return err
			}
			with, err := measureCost(ctx, c, as, exe, kubeconfig, dur, list, "--resources=all", "--resources.interval=10s")
			if err != nil {
				return err
			}
			after, err := measureCost(ctx, c, as, exe, kubeconfig, baseDur, list)
			if err != nil {
				return err
			}
			perAPIServer := float64(n)
			apiCPU := (with.apiserver - (before.apiserver+after.apiserver)/2) / perAPIServer
			noise := math.Abs(before.apiserver-after.apiserver) / perAPIServer
			reqs := (with.total() - (before.total()+after.total())/2) / perAPIServer
			fmt.Fprintf(r, "| %.0f | %d | %.1f | %.2f | %.1f | %.2f | %.2f | %.2f |\n", with.resources, n, with.interval, with.cpu, with.rss, apiCPU, noise, reqs)
			maxCPU, maxRSS = math.Max(maxCPU, apiCPU), math.Max(maxRSS, with.rss)
		}
	}
	r.target(maxCPU < 1, "--resources=all at the default budget: under 1% of a core added per apiserver at 63-1000 resources", fmt.Sprintf("at most %.2f%%", maxCPU))
	r.target(maxRSS < 64, "--resources=all: exporter RSS under 64 MiB at 1000 resources x 3 apiservers", fmt.Sprintf("at most %.1f MiB", maxRSS))
	return nil
}

// cost is what one passive exporter cost over its measurement: requests by
// verb (per second) and CPU (% of one core) summed over the apiservers
// measured, etcd's CPU, and the exporter's own.
type cost struct {
	requests             map[string]float64
	apiserver, etcd, cpu float64
	rss                  float64 // MiB, the largest seen
	resources, interval  float64 // measured, and their probe interval (s)
	compactions          float64 // compaction search watches per second
}

func (x *cost) total() (n float64) {
	for _, v := range x.requests {
		n += v
	}
	return n
}

// measureCost starts a passive exporter with args and measures it, after a
// 20 s warm-up, for dur or, when it probes resources, one probe interval
// and 10 s if that is longer.
func measureCost(ctx context.Context, c *testcluster.Cluster, as []*testcluster.APIServer, exe, kubeconfig string, dur time.Duration, args ...string) (*cost, error) {
	e, err := startExporter(exe, kubeconfig, append([]string{"--load.rate=0"}, args...)...)
	if err != nil {
		return nil, err
	}
	defer e.stop()
	sleep(ctx, 20*time.Second)
	if ivl := probeInterval(e); ivl > 0 {
		dur = max(dur, time.Duration(ivl*float64(time.Second))+10*time.Second)
	}
	pid := e.cmd.Process.Pid
	sample := func() (map[string]float64, float64, error) {
		byVerb, cpus := map[string]float64{}, 0.0
		for _, a := range as {
			reqs, err := requestsOf(ctx, a)
			if err != nil {
				return nil, 0, err
			}
			for verb, n := range reqs {
				byVerb[verb] += n
			}
			cpus += cpu(a.PID())
		}
		return byVerb, cpus, nil
	}
	r0, a0, err := sample()
	if err != nil {
		return nil, err
	}
	s0, e0, x0, t0 := e.metric("watchcache_resource_compaction_probes_total"), cpu(c.EtcdPID()), cpu(pid), time.Now()
	x := &cost{requests: map[string]float64{}}
	// Scraped as Prometheus would: a scrape of thousands of series is the
	// exporter's largest transient heap.
	lastScrape := time.Time{}
	for time.Since(t0) < dur && ctx.Err() == nil {
		if time.Since(lastScrape) >= scrapeEvery {
			lastScrape = time.Now()
			_, _ = e.families()
		}
		x.rss = math.Max(x.rss, rssMiB(pid))
		sleep(ctx, time.Second)
	}
	dt := time.Since(t0).Seconds()
	r1, a1, err := sample()
	if err != nil {
		return nil, err
	}
	for verb, n := range r1 {
		x.requests[verb] = (n - r0[verb]) / dt
	}
	x.apiserver, x.etcd, x.cpu = 100*(a1-a0)/dt, 100*(cpu(c.EtcdPID())-e0)/dt, 100*(cpu(pid)-x0)/dt
	x.resources, x.interval = float64(countSeries(e, "watchcache_resource_objects")), probeInterval(e)
	if s1 := e.metric("watchcache_resource_compaction_probes_total"); s1 > s0 { // NaN without --resources
		x.compactions = (s1 - s0) / dt
	}
	return x, ctx.Err()
}

// probeInterval is the longest resource probe interval the exporter reports.
func probeInterval(e *exporterProc) float64 {
	fams, err := e.families()
	if err != nil {
		return math.NaN()
	}
	ivl := math.NaN()
	for _, m := range fams["watchcache_resource_probe_interval_seconds"].GetMetric() {
		if v := m.GetGauge().GetValue(); math.IsNaN(ivl) || v > ivl {
			ivl = v
		}
	}
	return ivl
}

const crdGroup = "bench.watchcache.test"

// createCRD creates the i-th CRD of the bench's group, namespaced, with no
// schema to speak of.
func createCRD(ctx context.Context, dyn dynamic.Interface, i int) error {
	crd := testcluster.CRD(crdGroup, fmt.Sprintf("widget%04ds", i))
	_, err := dyn.Resource(testcluster.CRDs).Create(ctx, crd, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// warmCRDs lists the first n CRDs of the bench's group once on every
// apiserver, so that each has built their storage.
func warmCRDs(ctx context.Context, c *testcluster.Cluster, n int) error {
	for _, a := range c.APIServers() {
		cfg := a.AdminConfig()
		cfg.QPS = -1
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return err
		}
		for i := range n {
			gvr := schema.GroupVersionResource{Group: crdGroup, Version: "v1", Resource: fmt.Sprintf("widget%04ds", i)}
			err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				_, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
				return err == nil, nil
			})
			if err != nil {
				return fmt.Errorf("list %s on %s: %w", gvr.Resource, a.Name(), err)
			}
		}
	}
	return nil
}

// servedResources counts what --resources=all measures: the resources
// discovery serves with list and watch.
func servedResources(ctx context.Context, c *testcluster.Cluster) (int, error) {
	cs, err := kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		return 0, err
	}
	return testcluster.ServedListWatch(cs.Discovery())
}

// waitResources waits up to 10 minutes for n resources served.
func waitResources(ctx context.Context, c *testcluster.Cluster, n int) error {
	var got int
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		got, err = servedResources(ctx, c)
		return err == nil && got >= n, nil
	})
	if err != nil {
		return fmt.Errorf("%d served after 10 minutes, want %d: %w", got, n, err)
	}
	return nil
}

func requestsOf(ctx context.Context, a *testcluster.APIServer) (map[string]float64, error) {
	fams, err := a.Metrics(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, m := range fams["apiserver_request_total"].GetMetric() {
		out[gathered.Label(m, "verb")] += m.GetCounter().GetValue()
	}
	return out, nil
}

// countSeries counts the series of a family on the exporter's /metrics.
func countSeries(e *exporterProc, name string) int {
	fams, err := e.families()
	if err != nil {
		return 0
	}
	return len(fams[name].GetMetric())
}

// replaceSection puts section (it starts with "## N. ") into the report at
// path in place of the old section N, or at its end, and its summary rows
// (targets) into the summary table in place of those of the same target:
// for -only, which runs one section.
func replaceSections(path, sections string, targets []string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(old)
	for _, section := range strings.Split(sections, "\n## ")[1:] {
		s = replaceSection(s, "## "+section)
	}
	lines := strings.Split(s, "\n")
	for _, t := range targets {
		key := t[:strings.Index(t[2:], " | ")+5] // "| what | "
		i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, key) })
		if i < 0 { // a new target: at the end of the summary table
			h := slices.Index(lines, "|---|---|---|")
			if h < 0 {
				return fmt.Errorf("%s: no summary table", path)
			}
			i = h + 1
			for i < len(lines) && strings.HasPrefix(lines[i], "|") {
				i++
			}
			lines = slices.Insert(lines, i, "")
		}
		lines[i] = t
	}
	return os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644)
}

// replaceSection puts section ("## N. ...") in place of report s's section N,
// or before section 7 or at the end when s has none.
func replaceSection(s, section string) string {
	section = strings.TrimRight(section, "\n") + "\n"
	head := section[:strings.Index(section, ". ")+2] // "## 6. "
	if i := strings.Index(s, "\n"+head); i >= 0 {
		end := len(s)
		if j := strings.Index(s[i+1:], "\n## "); j >= 0 {
			end = i + 1 + j + 1
		}
		tail := s[end:]
		if tail != "" {
			tail = "\n" + tail
		}
		s = s[:i+1] + section + tail
	} else if i := strings.Index(s, "\n## 7. "); head == "## 6. " && i >= 0 {
		s = s[:i+1] + section + "\n" + s[i+1:]
	} else {
		s = strings.TrimRight(s, "\n") + "\n\n" + section
	}
	return s
}
