// Package daemon is the composition root of watchcache-exporter: flags to
// config, the parts built from it, and those parts run in order until a
// signal, then stopped in order.
package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/common/version"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiversion "k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/watchcache/watchcache-exporter/apiservers"
	"github.com/watchcache/watchcache-exporter/collector"
	"github.com/watchcache/watchcache-exporter/compaction"
	"github.com/watchcache/watchcache-exporter/internal/finalanswer"
	"github.com/watchcache/watchcache-exporter/internal/kube"
	"github.com/watchcache/watchcache-exporter/internal/leader"
	"github.com/watchcache/watchcache-exporter/internal/owned"
	"github.com/watchcache/watchcache-exporter/internal/preflight"
	"github.com/watchcache/watchcache-exporter/internal/ratelog"
	"github.com/watchcache/watchcache-exporter/internal/status"
	"github.com/watchcache/watchcache-exporter/load"
	"github.com/watchcache/watchcache-exporter/resources"
	"github.com/watchcache/watchcache-exporter/rvclock"
)

const name = "watchcache-exporter"

// Run is the command without the process: it returns the exit status, 2 for
// bad flags and 1 for a failure to start or to serve.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, errHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	if cfg.version {
		fmt.Fprintln(stdout, version.Print(name))
		return 0
	}
	slogger, log := newLogger(stderr, cfg.logLevel, cfg.logFormat)
	log.Info("starting", "version", version.Info(), "build", version.BuildContext())
	setMemoryLimit(slogger)
	p, err := build(ctx, cfg, slogger, log)
	if err == nil {
		err = p.run(ctx)
	}
	if err != nil {
		log.Error(err, "exiting")
		return 1
	}
	log.Info("stopped")
	return 0
}

// parts are the exporter's pieces, built and checked before any of them runs.
type parts struct {
	cfg  config
	log  logr.Logger
	slog *slog.Logger
	core kube.Core // the measurement's client
	// unthrottled, for the objects' check at start and their deletion at
	// the stop, each a few requests at a time (owned.Store paces them).
	unthrottled kube.Core
	store       *owned.Store
	leader      *leader.Elector
	hist        *rvclock.History
	rates       *rvclock.Rates
	writer      *load.Writer
	fleet       *apiservers.Fleet
	// The resources of --resources, and their object counts.
	resources *resources.Set // nil without --resources
	objects   *resources.Objects
	horizon   *compaction.Horizon // nil with --compaction.interval=0
	page      *status.Page
	gatherer  prometheus.Gatherer // what /metrics serves
	mux       http.Handler
	probes    http.Handler // the probes alone, for --web.probe-address
	// Either discovery finds the apiservers, or they are fixed.
	discovery kube.EndpointSlicesGetter
	endpoints []apiservers.Endpoint
	// stopBy is when the shutdown must be done (unix ns; 0 until it begins).
	stopBy atomic.Int64
	// left is what the end of the last lead left of the exporter's
	// ConfigMaps; nil before one ended.
	left atomic.Pointer[leftBehind]
}

// leftBehind is what a lead's end left of the exporter's ConfigMaps.
type leftBehind struct {
	leaseLost bool     // the Lease was lost first: nothing was deleted
	names     []string // the ConfigMaps left
}

// The shutdown budget (--shutdown.timeout) from its start: the ConfigMaps'
// deletion gets all but the last 30%, the Lease's deletion the next 20%,
// the HTTP server's close the last 10%.
const (
	leaseStopShare = 0.2
	httpStopShare  = 0.1
)

// countsClient is the object counts' client: throttled to half of
// --resources.budget (resCfg), and each 429 its caller's answer, counted,
// not retried in silence.
func countsClient(resCfg *rest.Config) (metadata.Interface, error) {
	c := rest.CopyConfig(resCfg)
	c.Wrap(finalanswer.Wrap)
	return metadata.NewForConfig(c)
}

// compactionClient is the compaction prober's: its budget is its own, one
// request in flight at a time (compaction.Horizon), and few of them (one per
// etcd and --compaction.interval, about log2(revisions) more after a
// compaction, a paginated LIST per --compaction.list-interval), so it is
// unthrottled: the LIST is timed as the apiserver serves it. A 429 is its
// caller's answer: counted, and a timed LIST it cuts short times nothing,
// rather than the silent retries' seconds.
func compactionClient(resCfg *rest.Config) (metadata.Interface, error) {
	c := rest.CopyConfig(resCfg)
	c.QPS = -1
	c.Wrap(finalanswer.Wrap)
	return metadata.NewForConfig(c)
}

// stopDeadline is the shutdown's deadline less share of its budget, for a
// step that later steps follow; before the shutdown, a budget from now.
func (p *parts) stopDeadline(share float64) time.Time {
	by := time.Now().Add(p.cfg.stopTimeout)
	if ns := p.stopBy.Load(); ns != 0 {
		by = time.Unix(0, ns)
	}
	return by.Add(-time.Duration(share * float64(p.cfg.stopTimeout)))
}

// build connects, checks RBAC and builds every part; it runs nothing.
func build(ctx context.Context, cfg config, slogger *slog.Logger, log logr.Logger) (*parts, error) {
	restCfg, err := restConfig(cfg.kubeconfig, cfg.context)
	if err != nil {
		return nil, err
	}
	restCfg.UserAgent = name + "/" + version.Version
	// Protobuf for the core/v1 requests: cheaper to decode than JSON.
	restCfg.ContentType = "application/vnd.kubernetes.protobuf"
	restCfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	// The measurement makes about four requests per probe interval and
	// apiserver; the load has a client of its own, sized to its cap.
	measureCfg := rest.CopyConfig(restCfg)
	measureCfg.QPS, measureCfg.Burst = 20, 40
	loadCfg := rest.CopyConfig(restCfg)
	loadCfg.QPS, loadCfg.Burst = load.ClientQPS(cfg.loadMaxRate)
	// One client for the measurement, its Lease and the start's RBAC check;
	// their requests share its rate limit.
	measure, err := kube.NewForConfig(measureCfg)
	if err != nil {
		return nil, err
	}
	loadCore, err := kube.NewForConfig(loadCfg)
	if err != nil {
		return nil, err
	}

	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sv, err := serverVersion(startCtx, measure.RESTClient())
	if err != nil {
		return nil, fmt.Errorf("apiserver %s unreachable: %w", restCfg.Host, err)
	}
	log.Info("connected", "apiserver", restCfg.Host, "serverVersion", sv.GitVersion, "mode", cfg.mode())
	p := &parts{cfg: cfg, log: log, slog: slogger, core: measure}
	// The resource probes (a watch per resource, interval and apiserver)
	// and object counts (a list per resource and interval) have clients of
	// their own, paced to --resources.budget (resources.Pace) and each
	// capped at half of it, so that even at once they stay within it on one
	// apiserver, and a long list of resources stretches its rounds rather
	// than the ConfigMap measurement's.
	resCfg := rest.CopyConfig(restCfg)
	resCfg.ContentType, resCfg.AcceptContentTypes = "", ""
	resCfg.QPS, resCfg.Burst = float32(cfg.resourcesRate/2), max(1, int(cfg.resourcesRate/2))
	// Deprecated types (v1 Endpoints) warn on every probe and count: news
	// for their clients, not for the measurement's log.
	resCfg.WarningHandler = rest.NoWarnings{}
	var atStart []resources.Resource
	if !cfg.resources.Empty() {
		if p.resources, err = resolveResources(startCtx, cfg, resCfg, log); err != nil {
			return nil, err
		}
		atStart = p.resources.Current()
	}
	if err := preflight.Check(startCtx, measure, neededAccess(cfg, atStart)); err != nil {
		return nil, err
	}

	// reg serves /metrics; the status page gathers its own few families
	// from pageReg. Every collector goes through regs, the two at once.
	reg, pageReg := prometheus.NewRegistry(), prometheus.NewRegistry()
	regs := status.Tee(reg, pageReg)
	p.store = owned.NewStore(cfg.namespace, cfg.quietName, regs, log.WithName("owned"), time.Now)
	var ownerRefs []metav1.OwnerReference
	switch ref, err := owned.ServiceAccountOwner(startCtx, measure.RESTClient(), cfg.namespace); {
	case err != nil:
		log.Info("objects get no owner: deleting the ServiceAccount will not delete what a killed exporter left", "err", err.Error())
	case ref != nil:
		p.store.OwnedBy(*ref)
		ownerRefs = []metav1.OwnerReference{*ref}
		log.Info("objects owned by the exporter's ServiceAccount: deleting it (helm uninstall) has the garbage collector delete them", "serviceAccount", cfg.namespace+"/"+ref.Name)
	}
	// The check of up to 1001 names at start and their deletion at the
	// stop, unthrottled but 8 at a time.
	checkCfg := rest.CopyConfig(restCfg)
	checkCfg.QPS = -1
	if p.unthrottled, err = kube.NewForConfig(checkCfg); err != nil {
		return nil, err
	}
	if p.leader, err = leader.New(leader.Config{Namespace: cfg.namespace, Name: cfg.quietName, Identity: leader.Identity(),
		StopDeadline: func() time.Time { return p.stopDeadline(httpStopShare) }, OwnerReferences: ownerRefs},
		measure, regs, log.WithName("leader")); err != nil {
		return nil, err
	}
	if err := refuseNotOwned(startCtx, cfg, p.store, p.unthrottled, p.leader); err != nil {
		return nil, err
	}
	regs.MustRegister(
		versioncollector.NewCollector("watchcache_exporter"),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	// Enough own writes for the largest cache (204800 events with a 135 s
	// window); 2 MiB.
	p.hist = rvclock.NewHistory(1 << 18)
	p.rates = rvclock.NewRates(p.hist, !cfg.writes(), cfg.probeInterval, regs)
	if p.writer, err = load.NewWriter(cfg.loadConfig(), loadCore, p.store, p.hist, regs, log.WithName("load")); err != nil {
		return nil, err
	}
	p.fleet = apiservers.NewFleet(func(ep apiservers.Endpoint) (apiservers.Measurement, error) {
		epCfg := rest.CopyConfig(measureCfg)
		epCfg.Host = ep.URL
		if cfg.apiservers == "discover" && epCfg.ServerName == "" {
			// Endpoints are IPs; the serving certificate names the Service.
			epCfg.ServerName = "kubernetes.default.svc"
		}
		// Each probe and watch sees its own answer: a 429 is counted as
		// one, and the pause it asks for is taken by our loops.
		epCfg.Wrap(finalanswer.Wrap)
		epCore, err := kube.NewForConfig(epCfg)
		if err != nil {
			return nil, err
		}
		var res collector.ResourcesConfig
		if p.resources != nil {
			epRes := rest.CopyConfig(resCfg)
			epRes.Host, epRes.ServerName = epCfg.Host, epCfg.ServerName
			epRes.Wrap(finalanswer.Wrap)
			if res.Client, err = dynamic.NewForConfig(epRes); err != nil {
				return nil, err
			}
			res.Resources, res.Pace = p.resources, cfg.resourcesPace()
		}
		return collector.New(collector.Config{
			Namespace:     cfg.namespace,
			QuietName:     cfg.quietName,
			ProbeInterval: cfg.probeInterval,
			HistoryWindow: cfg.historyWindow,
			Resources:     res,
			OnCycle:       cfg.cycleHook(ep.ID),
			Labels:        prometheus.Labels{"apiserver": ep.ID},
		}, epCore, p.store, p.hist, p.rates.Rate, regs,
			log.WithName("collector").WithValues("apiserver", ep.ID))
	}, cfg.graceDur, clock.RealClock{}, regs, log.WithName("apiservers"))
	if p.resources != nil {
		mc, err := countsClient(resCfg)
		if err != nil {
			return nil, err
		}
		current := func(ctx context.Context) (uint64, error) {
			return rvclock.CurrentRV(ctx, p.core, cfg.namespace, cfg.quietName)
		}
		p.objects = resources.NewObjects(mc, p.resources, p.hist, current, regs, log.WithName("resources"))
	}
	if cfg.compactionIvl > 0 {
		mc, err := compactionClient(resCfg)
		if err != nil {
			return nil, err
		}
		p.horizon = compaction.New(compaction.Config{Client: mc, Namespace: cfg.namespace, QuietName: cfg.quietName, History: p.hist,
			Resources: p.resources, Objects: p.objects, Interval: cfg.compactionIvl, ListInterval: cfg.listIvl},
			regs, log.WithName("compaction"))
	}
	switch cfg.apiservers {
	case "discover":
		p.discovery = measure
	case "":
		u, err := url.Parse(restCfg.Host)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig server %q: %w", restCfg.Host, err)
		}
		p.endpoints = []apiservers.Endpoint{{ID: apiservers.FromHost(u.Host).ID, URL: restCfg.Host}}
	default:
		p.endpoints, _ = apiservers.ParseList(cfg.apiservers) // validated with the flags
	}
	p.page = status.New(pageReg, 5*time.Second, 720, status.About{ // an hour
		Mode: cfg.mode(), Version: version.Version,
		Role: func() (string, string) {
			switch {
			case p.leader.Leading():
				return "leader", ""
			case p.leader.Standby():
				return "standby", p.leader.Holder()
			}
			return "", ""
		},
	})
	p.gatherer = reg
	p.mux = newMux(cfg, reg, p.ready, p.page.Handler(cfg.telemetryPath))
	p.probes = newProbeMux(p.ready)
	return p, nil
}

// run serves HTTP and campaigns for the Lease until ctx ends or the HTTP
// server fails; while it holds the Lease, it leads.
func (p *parts) run(ctx context.Context) error {
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	httpCtx, stopHTTP := context.WithCancel(context.Background())
	defer stopHTTP()
	httpDone := make(chan error, 1)
	go func() {
		httpDone <- listenAndServe(httpCtx, p.cfg, p.mux, p.probes, p.slog, func() time.Time { return p.stopDeadline(0) })
	}()
	var wg sync.WaitGroup
	wg.Go(func() { p.rates.Run(runCtx) })
	wg.Go(func() { p.page.Run(runCtx) })
	wg.Go(func() { p.leader.Run(runCtx, p.lead) })

	var httpErr error
	httpEnded := false
	select {
	case <-ctx.Done():
		p.log.Info("shutting down")
	case httpErr = <-httpDone:
		httpEnded = true
	}
	p.stopBy.Store(time.Now().Add(p.cfg.stopTimeout).UnixNano())
	stopRun()
	wg.Wait()
	stopHTTP()
	if !httpEnded {
		httpErr = <-httpDone
	}
	return httpErr
}

// lead writes and measures while this process holds the Lease, until ctx
// ends. Stop order: the load first, then the measurements and their
// watches; then, only if the Lease is still held (a shutdown, not a loss),
// the exporter's objects are deleted.
func (p *parts) lead(ctx context.Context, held func() bool) {
	loadCtx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	measureCtx, stopMeasure := context.WithCancel(context.Background())
	defer stopMeasure()
	var loadWG, measureWG sync.WaitGroup
	p.store.SetLeading(true)
	defer p.store.SetLeading(false)
	p.dropExtras(ctx)
	loadWG.Go(func() { p.writer.Run(loadCtx) })
	if p.cfg.idles() {
		errLog := ratelog.New(p.log.WithName("poll"), 30*time.Second, time.Now)
		measureWG.Go(func() {
			rvclock.Poll(measureCtx, p.core, p.cfg.namespace, p.cfg.quietName, p.cfg.probeInterval, p.hist, errLog)
		})
	}
	if p.objects != nil {
		measureWG.Go(func() { p.objects.Run(measureCtx, p.cfg.resourcesPace()) })
		measureWG.Go(func() { p.resources.Run(measureCtx, p.cfg.rediscover) })
	}
	if p.horizon != nil {
		measureWG.Go(func() { p.horizon.Run(measureCtx) })
	}
	if p.discovery != nil {
		measureWG.Go(func() { apiservers.Discover(measureCtx, p.discovery, p.fleet, p.log.WithName("apiservers")) })
	} else {
		p.fleet.Sync(measureCtx, p.endpoints)
	}
	<-ctx.Done()
	stopLoad()
	loadWG.Wait()
	stopMeasure()
	measureWG.Wait()
	p.fleet.Stop()
	names := p.objectNames()
	if !held() {
		// Whoever holds the Lease now writes them.
		p.left.Store(&leftBehind{leaseLost: true, names: names})
		return
	}
	cleanupCtx, cancelCleanup := context.WithDeadline(context.Background(), p.stopDeadline(leaseStopShare+httpStopShare))
	defer cancelCleanup()
	left, err := p.store.Delete(cleanupCtx, p.unthrottled, names...)
	p.left.Store(&leftBehind{names: left})
	if err != nil {
		p.log.Error(err, "deleting the exporter's ConfigMaps; those it could not delete are left, for the next exporter here to adopt, or for deleting by hand", "namespace", p.cfg.namespace, "owner", p.store.Owner(), "left", left)
	} else {
		p.log.Info("deleted the exporter's ConfigMaps", "namespace", p.cfg.namespace)
	}
}

// dropExtras deletes the noise objects that quiet's record names and this
// run does not make (a run killed with a higher --load.objects or another
// --noise.prefix made them), those of ours only, then records this run's.
// While some are left (RBAC grants get and delete on fewer names), the
// record keeps naming them, and the log says how to delete them by hand.
func (p *parts) dropExtras(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	quiet := p.cfg.quietName
	recorded, err := p.store.Recorded(ctx, p.unthrottled, quiet)
	if err != nil {
		p.log.Error(err, "cannot read which noise objects the last run made: those it made beyond this run's are not deleted", "namespace", p.cfg.namespace, "name", quiet)
		return
	}
	made := p.writer.Objects()
	extras := slices.DeleteFunc(recorded, func(n string) bool { return slices.Contains(made, n) })
	if len(extras) > 0 {
		left, err := p.store.Delete(ctx, p.unthrottled, extras...)
		if err != nil {
			p.log.Error(err, "cannot delete the noise objects a previous run made beyond this run's (RBAC: get and delete on their names); delete them by hand",
				"namespace", p.cfg.namespace, "left", left, "byHand", fmt.Sprintf("kubectl delete configmaps -n %s %s", p.cfg.namespace, strings.Join(left, " ")))
			return
		}
		p.log.Info("deleted the noise objects a previous run made beyond this run's", "namespace", p.cfg.namespace, "count", len(extras), "first", extras[0])
	}
	prefix := p.cfg.noisePrefix
	if len(made) == 0 {
		prefix = ""
	}
	if err := p.store.Record(ctx, p.unthrottled, quiet, prefix, len(made)); err != nil {
		p.log.Error(err, "cannot record which noise objects this run makes: if it is killed, the next run with fewer will not delete the rest", "namespace", p.cfg.namespace, "name", quiet)
	}
}

// objectNames are the ConfigMaps the exporter makes: the noise objects and
// quiet.
func (p *parts) objectNames() []string {
	return append(slices.Clone(p.writer.Objects()), p.cfg.quietName)
}

// ready fails while the holder's measurement is not ready or an object was
// lost, and while the process campaigns without a holder in sight (at start,
// or after losing the Lease to an unreachable apiserver). A standby is
// ready: it serves its metrics (leader 0), and a rollout need not wait for
// the Lease.
func (p *parts) ready() error {
	switch {
	case p.leader.Leading():
		return errors.Join(p.fleet.Ready(), p.store.Ready())
	case p.leader.Standby():
		return nil
	default:
		return errors.New("not holding the Lease, and no other holder seen")
	}
}

// resolveResources finds the resources of --resources through discovery,
// and returns them as a Set that reads discovery again when it runs.
func resolveResources(ctx context.Context, cfg config, resCfg *rest.Config, log logr.Logger) (*resources.Set, error) {
	disc, err := kube.NewForConfig(resCfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(resCfg)
	if err != nil {
		return nil, err
	}
	resolve := func(ctx context.Context) ([]resources.Resource, error) {
		return resources.Resolve(ctx, disc, dyn, cfg.resources)
	}
	rs, err := resolve(ctx)
	switch {
	case rs != nil && resources.OnlyNotServed(err):
		// A CRD installed later: measured once discovery lists it.
		log.Info("resources named in --resources are not served now: not measured until they are", "reason", err.Error(), "rediscover", cfg.rediscover)
	case err != nil:
		return nil, fmt.Errorf("--resources: %w", err)
	}
	log.Info("measuring the window of every resource named", "resources", strings.Join(resources.Names(rs), ","), "count", len(rs),
		"interval", cfg.resourcesPace().For(len(rs)), "budget", cfg.resourcesRate, "rediscover", cfg.rediscover)
	return resources.NewSet(rs, resolve, log.WithName("resources")), nil
}

// refuseNotOwned fails when quiet, a noise object or the Lease exists
// without the exporter's marks: somebody else's object, which it must not
// write.
func refuseNotOwned(ctx context.Context, cfg config, store *owned.Store, c kube.Core, lease *leader.Elector) error {
	var msgs []string
	theirs, err := store.NotOwned(ctx, c, cfg.quietName)
	if err != nil {
		return err
	}
	if len(theirs) > 0 {
		msgs = append(msgs, fmt.Sprintf("configmap %s/%s exists and is not this exporter's: choose another name with --quiet.name", cfg.namespace, cfg.quietName))
	}
	if notOurs, err := lease.NotOurs(ctx); err != nil {
		return fmt.Errorf("reading the lease %s/%s: %w", cfg.namespace, cfg.quietName, err)
	} else if notOurs {
		msgs = append(msgs, fmt.Sprintf("lease %s/%s exists and is not this exporter's: choose another name with --quiet.name", cfg.namespace, cfg.quietName))
	}
	if cfg.writes() {
		if theirs, err = store.NotOwned(ctx, c, cfg.loadConfig().Names()...); err != nil {
			return err
		}
		if len(theirs) > 0 {
			msgs = append(msgs, fmt.Sprintf("configmaps %s of namespace %s exist and are not this exporter's: choose another prefix with --noise.prefix", strings.Join(theirs, ","), cfg.namespace))
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	msgs = append(msgs, fmt.Sprintf("left as they are (the exporter's own carry the label %s and the annotation %s=%s)", owned.ManagedBySelector, owned.OwnerAnnotation, store.Owner()))
	return errors.New(strings.Join(msgs, "; "))
}

// serverVersion reads /version through c.
func serverVersion(ctx context.Context, c rest.Interface) (*apiversion.Info, error) {
	body, err := c.Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return nil, err
	}
	var info apiversion.Info
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, fmt.Errorf("/version: %w", err)
	}
	return &info, nil
}

// restConfig loads --kubeconfig at --context; with neither, the in-cluster
// config, or else the usual kubeconfig rules.
func restConfig(path, context string) (*rest.Config, error) {
	if path == "" && context == "" {
		if c, err := rest.InClusterConfig(); err == nil {
			return c, nil
		}
	}
	c, err := kubeClientConfig(path, context).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	return c, nil
}
