package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/spf13/pflag"

	"github.com/watchcache/watchcache-exporter/collector"
	"github.com/watchcache/watchcache-exporter/experiment"
	"github.com/watchcache/watchcache-exporter/internal/gathered"
)

// ExitInterrupted is the experiment's exit status after Ctrl-C (128 +
// SIGINT), as a shell gives it.
const ExitInterrupted = 130

// experimentFlags are the experiment's own; the rest are the daemon's.
type experimentFlags struct {
	timeout time.Duration
	output  string
	repeat  int
}

// The daemon's flags that mean nothing to a command that serves no HTTP and
// runs at one rate: hidden from the experiment's help.
var notForExperiment = []string{"load.schedule", "web.listen-address", "web.probe-address", "web.telemetry-path",
	"web.max-requests", "web.config.file", "version", "compaction.interval", "compaction.list-interval"}

// articleRate is the experiment's default rate: the article's, about 85
// patches/s from 8 threads.
const articleRate = 85

func newExperimentFlagSet(c *config, x *experimentFlags, stderr io.Writer) *pflag.FlagSet {
	fs := newFlagSet(c, stderr)
	// The defaults of a command run by hand: the article's rate, and a log
	// that only speaks up when something is wrong.
	c.loadRate, fs.Lookup("load.rate").DefValue = articleRate, fmt.Sprint(articleRate)
	c.logLevel, fs.Lookup("log.level").DefValue = "warn", "warn"
	c.logFormat, fs.Lookup("log.format").DefValue = "text", "text"
	// The LIST horizon is not the experiment's subject.
	c.compactionIvl, fs.Lookup("compaction.interval").DefValue = 0, "0s"
	fs.Lookup("load.rate").Usage = "Noise writes per second, constant; more than 0."
	for _, name := range notForExperiment {
		_ = fs.MarkHidden(name)
	}
	fs.DurationVar(&x.timeout, "timeout", 10*time.Minute, "How long to wait for the first 410 of every apiserver (each cycle's, with --repeat) before stopping without it. 10s to 24h.")
	fs.StringVar(&x.output, "output", "text", "Format of the report on standard output: "+strings.Join(experiment.Formats, ", ")+".")
	fs.IntVar(&x.repeat, "repeat", 1, "Expiry cycles to measure on each apiserver, one after the other; with more than one, the report gives each and their spread. 1 to 100.")
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: watchcache-exporter experiment [flags]   (or: kubectl watchcache experiment [flags])

The article's experiment on the cluster of the kubeconfig's current context
(or --context): it creates its marked ConfigMaps in --namespace (default: the
context's), writes the load, keeps a plain and a bookmark watcher open on the
quiet ConfigMap, and reconnects from its stale resourceVersion every
--probe.interval until the apiserver refuses it with 410. Then it reconnects from the latest BOOKMARK, relists, deletes what it
made, and prints what it saw beside what the apiserver's sizing rules
predict. Ctrl-C stops it at any point, deleting what it made.

Exit status: 0 when every apiserver gave its 410s; 1 on an error or when
--timeout came first; 2 for bad flags; 130 after Ctrl-C.

Flags:
%s`, fs.FlagUsages())
	}
	return fs
}

func parseExperimentFlags(args []string, stderr io.Writer) (config, experimentFlags, error) {
	var c config
	var x experimentFlags
	fs := newExperimentFlagSet(&c, &x, stderr)
	if err := c.parse(fs, args); err != nil {
		return c, x, err
	}
	var errs []error
	if fs.Changed("load.schedule") {
		errs = append(errs, errors.New("--load.schedule: the experiment writes at one rate; set --load.rate"))
	}
	if !(c.loadRate > 0) {
		errs = append(errs, fmt.Errorf("--load.rate=%v: the experiment needs writes: more than 0", c.loadRate))
	}
	if x.timeout < 10*time.Second || x.timeout > 24*time.Hour {
		errs = append(errs, fmt.Errorf("--timeout=%s: must be between 10s and 24h", x.timeout))
	}
	if !slices.Contains(experiment.Formats, x.output) {
		errs = append(errs, fmt.Errorf("--output=%q: want one of %s", x.output, strings.Join(experiment.Formats, ", ")))
	}
	if x.repeat < 1 || x.repeat > 100 {
		errs = append(errs, fmt.Errorf("--repeat=%d: must be between 1 and 100", x.repeat))
	}
	return c, x, errors.Join(errs...)
}

// RunExperiment is `watchcache-exporter experiment`: the daemon's parts
// (ownership marks, Lease, load, watchers, probes, model) run until every
// apiserver has ended --repeat expiry cycles, then stopped as the daemon
// stops, and the report printed to stdout. Progress goes to stderr, one line
// rewritten in place when tty says stderr is a terminal.
func RunExperiment(ctx context.Context, args []string, stdout, stderr io.Writer, tty bool) int {
	cfg, x, err := parseExperimentFlags(args, stderr)
	if errors.Is(err, errHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s experiment: %v\n", name, err)
		return 2
	}
	var mu sync.Mutex
	cycles := map[string][]experiment.Cycle{}
	cfg.onCycle = func(apiserver string, c collector.Cycle) {
		mu.Lock()
		defer mu.Unlock()
		if len(cycles[apiserver]) < x.repeat {
			cycles[apiserver] = append(cycles[apiserver], experiment.FromCycle(c))
		}
	}
	slogger, log := newLogger(stderr, cfg.logLevel, cfg.logFormat)
	p, err := build(ctx, cfg, slogger, log)
	if err == nil {
		err = p.refuseHeldLease(ctx)
	}
	if err != nil {
		if ctx.Err() != nil {
			return ExitInterrupted
		}
		fmt.Fprintf(stderr, "%s experiment: %v\n", name, err)
		return 1
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() { p.rates.Run(runCtx) })
	wg.Go(func() { p.leader.Run(runCtx, p.lead) })

	line := experiment.NewLine(stderr, tty, 10*time.Second)
	start := time.Now()
	deadline := time.NewTimer(x.timeout)
	defer deadline.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var readings []reading
	var members []string
	var windows map[string][]experiment.ResourceWindow
	timedOut := false
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-deadline.C:
			timedOut = true
			break loop
		case now := <-tick.C:
			fams := gatherByName(p)
			members = labelValues(fams["watchcache_watch_open"], "apiserver")
			windows = resourceWindows(fams)
			mu.Lock()
			done, total := len(members) > 0, 0
			for _, m := range members {
				n := len(cycles[m])
				total += n
				done = done && n >= x.repeat
			}
			mu.Unlock()
			var pr experiment.Progress
			pr, readings = progressOf(fams, now, start, readings)
			pr.Cycles, pr.Want = total, x.repeat*len(members)
			line.Show(now, pr)
			if done {
				break loop
			}
		}
	}
	line.Clear()
	switch {
	case ctx.Err() != nil && p.leader.Leading():
		fmt.Fprintf(stderr, "stopping: deleting the experiment's ConfigMaps and Lease; interrupt again to exit at once and leave them (%s)\n", p.byHand())
	case ctx.Err() == nil:
		fmt.Fprintln(stderr, "stopping: deleting the experiment's ConfigMaps and Lease")
	}
	// One budget for the whole stop, as the daemon's.
	p.stopBy.Store(time.Now().Add(p.cfg.stopTimeout).UnixNano())
	stop()
	wg.Wait()
	left := p.saysLeft(stderr)
	if ctx.Err() != nil {
		if !left {
			fmt.Fprintf(stderr, "%s experiment: interrupted; deleted what it made\n", name)
		}
		return ExitInterrupted
	}

	r := &experiment.Report{
		Namespace: cfg.namespace, WritesPerSecond: cfg.loadRate, NoiseObjects: cfg.loadObjects,
		HistoryWindowSeconds: cfg.historyWindow.Seconds(), Predicted: experiment.Predict(cfg.loadRate, cfg.historyWindow),
		TimeoutSeconds: x.timeout.Seconds(), TimedOut: timedOut,
	}
	mu.Lock()
	for id := range cycles {
		if !slices.Contains(members, id) {
			members = append(members, id) // an apiserver that left the fleet
		}
	}
	slices.Sort(members)
	for _, m := range members {
		r.APIServers = append(r.APIServers, experiment.APIServer{APIServer: m, Cycles: cycles[m],
			Spread: experiment.SpreadOf(cycles[m]), Resources: windows[m]})
	}
	mu.Unlock()
	if err := r.Write(stdout, x.output); err != nil {
		fmt.Fprintf(stderr, "%s experiment: %v\n", name, err)
		return 1
	}
	if timedOut || left {
		return 1
	}
	return 0
}

// saysLeft writes what the experiment's lead left of its ConfigMaps, if
// anything, and says whether it did.
func (p *parts) saysLeft(stderr io.Writer) bool {
	lb := p.left.Load()
	switch {
	case lb == nil || len(lb.names) == 0:
		return false
	case lb.leaseLost:
		fmt.Fprintf(stderr, "%s experiment: the Lease %s/%s was lost before the stop (another exporter may hold it now, and write them): nothing deleted; left the ConfigMaps %s\n",
			name, p.cfg.namespace, p.cfg.quietName, strings.Join(lb.names, ", "))
	default:
		fmt.Fprintf(stderr, "%s experiment: could not delete the ConfigMaps %s (the log says why; %s)\n", name, strings.Join(lb.names, ", "), p.byHand())
	}
	return true
}

// byHand is how to delete by hand what the experiment makes, by name: a
// label would match another exporter's objects in the namespace too.
func (p *parts) byHand() string {
	names := p.objectNames()
	return fmt.Sprintf("kubectl delete configmaps -n %[1]s %[2]s; kubectl delete lease -n %[1]s %[3]s deletes them",
		p.cfg.namespace, strings.Join(names, " "), p.cfg.quietName)
}

// refuseHeldLease fails when another exporter holds the Lease: one writer
// per namespace and quiet name.
func (p *parts) refuseHeldLease(ctx context.Context) error {
	holder, err := p.leader.HeldByOther(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("reading the lease %s/%s: %w", p.cfg.namespace, p.cfg.quietName, err)
	case holder != "":
		return fmt.Errorf("lease %s/%s is held by %s: an exporter measures this namespace already; stop it, or run the experiment with another --namespace or --quiet.name",
			p.cfg.namespace, p.cfg.quietName, holder)
	}
	return nil
}

func gatherByName(p *parts) map[string]*dto.MetricFamily {
	fams, _ := p.gatherer.Gather() // a partial answer is still worth showing
	out := make(map[string]*dto.MetricFamily, len(fams))
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

func labelValues(f *dto.MetricFamily, name string) []string {
	var out []string
	for _, m := range f.GetMetric() {
		if v := gathered.Label(m, name); v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// reading is the exporter's writes at one moment, for the progress rate.
type reading struct {
	at     time.Time
	writes float64
}

// progressOf reads the progress line's figures from the exporter's own
// series; the rate is over the last 5 s of readings.
func progressOf(fams map[string]*dto.MetricFamily, now, start time.Time, readings []reading) (experiment.Progress, []reading) {
	pr := experiment.Progress{Elapsed: now.Sub(start), Rate: math.NaN(), Window: math.NaN(), Distance: math.NaN()}
	writes := 0.0
	for _, m := range fams["watchcache_exporter_writes_total"].GetMetric() {
		writes += gathered.Value(m)
	}
	pr.Writes = uint64(writes)
	readings = append(readings, reading{now, writes})
	for len(readings) > 1 && now.Sub(readings[1].at) >= 5*time.Second {
		readings = readings[1:]
	}
	if first := readings[0]; now.Sub(first.at) > 0 && len(readings) > 1 {
		pr.Rate = (writes - first.writes) / now.Sub(first.at).Seconds()
	}
	for _, m := range fams["watchcache_window_seconds"].GetMetric() {
		if v := gathered.Value(m); gathered.Label(m, "group") == "" && gathered.Label(m, "resource") == "configmaps" && !math.IsNaN(v) && !(v >= pr.Window) {
			pr.Window = v
		}
	}
	for _, m := range fams["watchcache_stale_distance_live_resource_versions"].GetMetric() {
		if v := gathered.Value(m); !math.IsNaN(v) && !(v <= pr.Distance) {
			pr.Distance = v
		}
	}
	return pr, readings
}

// resourceWindows are the windows of --resources by apiserver, as the
// exporter's series give them.
func resourceWindows(fams map[string]*dto.MetricFamily) map[string][]experiment.ResourceWindow {
	type key struct{ apiserver, group, resource string }
	lower := map[key]bool{}
	for _, m := range fams["watchcache_window_lower_bound"].GetMetric() {
		lower[key{gathered.Label(m, "apiserver"), gathered.Label(m, "group"), gathered.Label(m, "resource")}] = gathered.Value(m) == 1
	}
	out := map[string][]experiment.ResourceWindow{}
	for _, m := range fams["watchcache_window_seconds"].GetMetric() {
		k := key{gathered.Label(m, "apiserver"), gathered.Label(m, "group"), gathered.Label(m, "resource")}
		if k.group == "" && k.resource == "configmaps" {
			continue // the experiment's own, reported as its cycles
		}
		out[k.apiserver] = append(out[k.apiserver], experiment.ResourceWindow{Group: k.group, Resource: k.resource, Seconds: gathered.Value(m), LowerBound: lower[k]})
	}
	for _, ws := range out {
		slices.SortFunc(ws, func(a, b experiment.ResourceWindow) int {
			return strings.Compare(a.Group+"/"+a.Resource, b.Group+"/"+b.Resource)
		})
	}
	return out
}
