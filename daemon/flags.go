package daemon

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/watchcache/watchcache-exporter/apiservers"
	"github.com/watchcache/watchcache-exporter/collector"
	"github.com/watchcache/watchcache-exporter/internal/status"
	"github.com/watchcache/watchcache-exporter/load"
	"github.com/watchcache/watchcache-exporter/resources"
)

// config is everything the command line sets.
type config struct {
	kubeconfig    string
	context       string
	namespace     string
	quietName     string
	noisePrefix   string
	loadRate      float64
	loadSchedule  string
	schedule      load.Schedule // from --load.rate or --load.schedule
	historyWindow time.Duration
	apiservers    string
	graceDur      time.Duration
	stopTimeout   time.Duration
	resources     resources.Spec
	resourcesRaw  string
	resourcesIvl  time.Duration
	resourcesRate float64
	rediscover    time.Duration
	compactionIvl time.Duration
	listIvl       time.Duration
	loadMaxRate   float64
	loadObjects   int
	probeInterval time.Duration
	listenAddress string
	probeAddress  string
	telemetryPath string
	maxRequests   int
	webConfigFile string
	logLevel      string
	logFormat     string
	version       bool
	// onCycle, when set, gets every expiry cycle of every apiserver (the
	// experiment command); no flag sets it.
	onCycle func(apiserver string, c collector.Cycle)
}

// errHelp is returned for --help: usage was printed, exit 0.
var errHelp = pflag.ErrHelp

// parseFlags parses and validates args. Its errors name the bad flag.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := newFlagSet(&c, stderr)
	err := c.parse(fs, args)
	return c, err
}

// parse parses args into c through fs, a flag set defined into c, and
// validates the result.
func (c *config) parse(fs *pflag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: this command takes only flags", fs.Arg(0))
	}
	var errs []error
	if err := c.resolveKubeconfig(fs.Changed("namespace")); err != nil {
		errs = append(errs, err)
	}
	c.schedule = load.Constant(c.loadRate)
	if c.loadSchedule != "" {
		if fs.Changed("load.rate") {
			errs = append(errs, errors.New("--load.rate and --load.schedule: set one of them"))
		}
		s, err := load.ParseSchedule(c.loadSchedule)
		if err != nil {
			errs = append(errs, fmt.Errorf("--load.schedule=%q: %w", c.loadSchedule, err))
		}
		c.schedule = s
	}
	var err error
	if c.resources, err = resources.ParseSpec(c.resourcesRaw); err != nil {
		errs = append(errs, fmt.Errorf("--resources=%q: %w", c.resourcesRaw, err))
	}
	return errors.Join(append(errs, c.validate())...)
}

func (c config) validate() error {
	var errs []error
	if msgs := validation.IsDNS1123Label(c.namespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--namespace=%q: %s", c.namespace, strings.Join(msgs, "; ")))
	}
	if msgs := validation.IsDNS1123Subdomain(c.quietName); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--quiet.name=%q: %s", c.quietName, strings.Join(msgs, "; ")))
	}
	// The longest noise name must be a valid name too.
	if msgs := validation.IsDNS1123Subdomain(c.noisePrefix + strconv.Itoa(max(c.loadObjects-1, 0))); c.noisePrefix == "" || len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--noise.prefix=%q: does not make valid ConfigMap names: %s", c.noisePrefix, strings.Join(msgs, "; ")))
	}
	if c.noisePrefix != "" && strings.HasPrefix(c.quietName, c.noisePrefix) {
		if _, err := strconv.Atoi(strings.TrimPrefix(c.quietName, c.noisePrefix)); err == nil {
			errs = append(errs, fmt.Errorf("--quiet.name=%q is one of the noise objects of --noise.prefix=%q", c.quietName, c.noisePrefix))
		}
	}
	if c.schedule != nil {
		errs = append(errs, c.loadFlagErrors(c.loadConfig().Validate())...)
	}
	if c.historyWindow < 75*time.Second {
		errs = append(errs, fmt.Errorf("--apiserver.history-window=%s: the apiserver never keeps less than 75s", c.historyWindow))
	} else if c.historyWindow > time.Hour {
		// The simulated cache grows with window × rate: 1h at the 100000
		// writes/s cap is the most it may hold.
		errs = append(errs, fmt.Errorf("--apiserver.history-window=%s: at most 1h (the apiserver's is its --request-timeout + 15s)", c.historyWindow))
	}
	if c.apiservers != "" && c.apiservers != "discover" {
		if _, err := apiservers.ParseList(c.apiservers); err != nil {
			errs = append(errs, fmt.Errorf("--apiservers: %w", err))
		}
	}
	if c.graceDur < 0 || c.graceDur > time.Hour {
		errs = append(errs, fmt.Errorf("--apiservers.grace-period=%s: must be between 0s and 1h", c.graceDur))
	}
	if c.stopTimeout < 5*time.Second || c.stopTimeout > 10*time.Minute {
		errs = append(errs, fmt.Errorf("--shutdown.timeout=%s: must be between 5s and 10m", c.stopTimeout))
	}
	if c.resourcesIvl < time.Second || c.resourcesIvl > 10*time.Minute {
		errs = append(errs, fmt.Errorf("--resources.interval=%s: must be between 1s and 10m", c.resourcesIvl))
	}
	if !(c.resourcesRate >= 1 && c.resourcesRate <= 1000) {
		errs = append(errs, fmt.Errorf("--resources.budget=%v: must be between 1 and 1000 requests per second", c.resourcesRate))
	}
	if c.rediscover < 10*time.Second || c.rediscover > time.Hour {
		errs = append(errs, fmt.Errorf("--resources.rediscover=%s: must be between 10s and 1h", c.rediscover))
	}
	if c.compactionIvl != 0 && (c.compactionIvl < time.Second || c.compactionIvl > 10*time.Minute) {
		errs = append(errs, fmt.Errorf("--compaction.interval=%s: must be 0 (off) or between 1s and 10m", c.compactionIvl))
	}
	if c.listIvl != 0 && (c.listIvl < time.Minute || c.listIvl > 24*time.Hour) {
		errs = append(errs, fmt.Errorf("--compaction.list-interval=%s: must be 0 (off) or between 1m and 24h", c.listIvl))
	}
	if c.probeInterval < 100*time.Millisecond || c.probeInterval > time.Minute {
		errs = append(errs, fmt.Errorf("--probe.interval=%s: must be between 100ms and 1m", c.probeInterval))
	}
	if c.listenAddress == "" {
		errs = append(errs, errors.New("--web.listen-address must not be empty"))
	}
	if c.probeAddress != "" && c.probeAddress == c.listenAddress {
		errs = append(errs, fmt.Errorf("--web.probe-address=%q is --web.listen-address: want another port, or empty", c.probeAddress))
	}
	if err := checkTelemetryPath(c.telemetryPath); err != nil {
		errs = append(errs, fmt.Errorf("--web.telemetry-path=%q: %w", c.telemetryPath, err))
	}
	if c.maxRequests < 0 {
		errs = append(errs, fmt.Errorf("--web.max-requests=%d: must be 0 (no limit) or more", c.maxRequests))
	}
	if c.webConfigFile != "" {
		if _, err := os.Stat(c.webConfigFile); err != nil {
			errs = append(errs, fmt.Errorf("--web.config.file: %w", err))
		}
	}
	if c.kubeconfig != "" {
		if _, err := os.Stat(c.kubeconfig); err != nil {
			errs = append(errs, fmt.Errorf("--kubeconfig: %w", err))
		}
	}
	if _, err := parseLevel(c.logLevel); err != nil {
		errs = append(errs, err)
	}
	if c.logFormat != "json" && c.logFormat != "text" {
		errs = append(errs, fmt.Errorf("--log.format=%q: want json or text", c.logFormat))
	}
	return errors.Join(errs...)
}

// reservedPaths are the exporter's own, which metrics may not shadow.
var reservedPaths = []string{"/", "/healthz", "/readyz", status.JSONPath}

// checkTelemetryPath accepts a clean absolute path of plain characters: no
// ServeMux pattern syntax (wildcards, methods, escapes) and none of the
// exporter's own paths.
func checkTelemetryPath(p string) error {
	if !strings.HasPrefix(p, "/") {
		return errors.New("must start with /")
	}
	for _, r := range p {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/-._~", r)) {
			return fmt.Errorf("%q: want letters, digits and - . _ ~ / only", r)
		}
	}
	if path.Clean(p) != p {
		return fmt.Errorf("not a clean path (it is %q)", path.Clean(p))
	}
	if slices.Contains(reservedPaths, p) {
		return fmt.Errorf("is one of the exporter's own paths (%s)", strings.Join(reservedPaths, ", "))
	}
	return nil
}

// loadFlagErrors names the flag of each field load.Config.Validate refused.
func (c config) loadFlagErrors(err error) []error {
	if err == nil {
		return nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	out := make([]error, 0, len(errs))
	for _, e := range errs {
		var fe *load.FieldError
		if !errors.As(e, &fe) {
			out = append(out, e)
			continue
		}
		switch fe.Field {
		case "MaxRate":
			e = fmt.Errorf("--load.max-rate=%v: %w", c.loadMaxRate, fe.Err)
		case "Objects":
			e = fmt.Errorf("--load.objects=%d: %w", c.loadObjects, fe.Err)
		case "Schedule":
			flag := "--load.schedule"
			if c.schedule.IsConstant() {
				flag = "--load.rate"
			}
			if c.schedule.Max() > c.loadMaxRate {
				e = fmt.Errorf("%s: %w (--load.max-rate)", flag, fe.Err)
			} else {
				e = fmt.Errorf("%s: %w", flag, fe.Err)
			}
		}
		out = append(out, e)
	}
	return out
}

// The mode, worked out once from the schedule.

// writes says whether the schedule ever writes noise (else: passive mode).
func (c config) writes() bool { return c.schedule.Max() > 0 }

// idles says whether the schedule has times without writes, when the RV
// clock must learn from polling instead.
func (c config) idles() bool { return c.schedule.Passive() }

func (c config) mode() string {
	if c.writes() {
		return "load"
	}
	return "passive"
}

func defaultNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return "default"
}

// kubeClientConfig reads the kubeconfig as kubectl does: path, else
// $KUBECONFIG, else ~/.kube/config, at context or else its current context.
func kubeClientConfig(path, context string) clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context})
}

// resolveKubeconfig checks --context and, unless --namespace or
// $POD_NAMESPACE set it, takes the namespace of the kubeconfig's context (in
// a pod without a kubeconfig, the pod's own), as kubectl does: so that
// `kubectl watchcache experiment` writes where `kubectl get cm` reads.
func (c *config) resolveKubeconfig(namespaceSet bool) error {
	if c.context != "" {
		raw, err := kubeClientConfig(c.kubeconfig, "").RawConfig()
		if err != nil {
			return fmt.Errorf("--context=%q: %w", c.context, err)
		}
		if raw.Contexts[c.context] == nil {
			return fmt.Errorf("--context=%q: no such context in the kubeconfig (it has: %s)", c.context, strings.Join(slices.Sorted(maps.Keys(raw.Contexts)), ", "))
		}
	}
	if namespaceSet || os.Getenv("POD_NAMESPACE") != "" {
		return nil
	}
	// No kubeconfig at all is not an error here: connecting says so.
	if ns, _, err := kubeClientConfig(c.kubeconfig, c.context).Namespace(); err == nil && ns != "" {
		c.namespace = ns
	}
	return nil
}

func (c config) loadConfig() load.Config {
	return load.Config{
		Namespace: c.namespace,
		Prefix:    c.noisePrefix,
		Objects:   c.loadObjects,
		Schedule:  c.schedule,
		MaxRate:   c.loadMaxRate,
	}
}

// newFlagSet defines the flags into c.
func newFlagSet(c *config, stderr io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet("watchcache-exporter", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "Path to a kubeconfig. Default: in-cluster config, then the usual kubeconfig rules ($KUBECONFIG, ~/.kube/config).")
	fs.StringVar(&c.context, "context", "", "The kubeconfig context to use. Default: its current context.")
	fs.StringVarP(&c.namespace, "namespace", "n", defaultNamespace(), "Namespace of the exporter's ConfigMaps and Lease. Default: $POD_NAMESPACE, then the kubeconfig context's namespace (in a pod, its own), then default.")
	fs.StringVar(&c.quietName, "quiet.name", "watchcache-quiet", "Name of the quiet ConfigMap that the watchers watch and the expiry cycles touch.")
	fs.StringVar(&c.noisePrefix, "noise.prefix", "watchcache-noise-", "Name prefix of the noise ConfigMaps (<prefix>0, <prefix>1, ...).")
	fs.Float64Var(&c.loadRate, "load.rate", 10, "Noise writes per second; 0 is passive mode: no load, measurement only.")
	fs.StringVar(&c.loadSchedule, "load.schedule", "", "Write rates over time, repeated: steps rate:duration (40:5m,100:5m,40:5m) or a geometric sweep up and down (sweep:FROM:TO:STEPS:DURATION, e.g. sweep:10:400:6:3m). Replaces --load.rate.")
	fs.Float64Var(&c.loadMaxRate, "load.max-rate", 500, "Hard cap on --load.rate, writes per second.")
	fs.DurationVar(&c.stopTimeout, "shutdown.timeout", 25*time.Second, "Time from SIGTERM to exit, whatever the apiserver does: deleting the exporter's ConfigMaps, then its Lease, then closing the HTTP server. Keep it below the pod's terminationGracePeriodSeconds; what it leaves, the log names. 5s to 10m.")
	fs.IntVar(&c.loadObjects, "load.objects", 8, "Number of noise ConfigMaps the load is spread over (one hot object collapses under concurrent patches).")
	fs.DurationVar(&c.probeInterval, "probe.interval", time.Second, "Interval between reconnect probes; the resolution of time to first 410. 100ms to 1m.")
	fs.DurationVar(&c.historyWindow, "apiserver.history-window", 75*time.Second, "The apiserver's watch cache history window, for the predicted window: 75s, or its --request-timeout + 15s when that is larger.")
	fs.StringVar(&c.apiservers, "apiservers", "", "Apiserver instances to measure: empty for the kubeconfig's endpoint, \"discover\" for every endpoint of the default/kubernetes Service, or a list https://host:port,... With discover, each endpoint's certificate is verified as kubernetes.default.svc.")
	fs.DurationVar(&c.graceDur, "apiservers.grace-period", 3*time.Minute, "With --apiservers=discover: how long an apiserver that left the kubernetes EndpointSlices is still measured, with its series and history, so that its restart shows as a cache reset. 0 removes it at once; at most 1h.")
	fs.StringVar(&c.resourcesRaw, "resources", "", "Resources whose watch cache windows to measure too, without writing: a list of resource.group names (pods,leases.coordination.k8s.io,endpointslices.discovery.k8s.io) or \"all\" (every resource served with list and watch, aggregated apiservers left out). Needs list and watch on them cluster-wide (deploy/components/resources).")
	fs.DurationVar(&c.resourcesIvl, "resources.interval", 10*time.Second, "Interval between two window probes and object counts of each resource of --resources: a window probe per resource and apiserver, and an object count per resource; stretched to fit --resources.budget. 1s to 10m.")
	fs.Float64Var(&c.resourcesRate, "resources.budget", 5, "Requests per second that the measurement of --resources may send to any one apiserver: with many resources, --resources.interval stretches until a round of 2 requests per resource fits (watchcache_resource_probe_interval_seconds says to what). 1 to 1000.")
	fs.DurationVar(&c.rediscover, "resources.rediscover", 3*time.Minute, "Interval between two readings of discovery, so that resources installed later (CRDs) are measured and removed ones dropped without a restart. 10s to 1h.")
	fs.DurationVar(&c.compactionIvl, "compaction.interval", 15*time.Second, "Interval between two checks of etcd's compaction (the LIST horizon), for each etcd: one LIST at an exact resourceVersion, limit=1, and about log2(revisions since) more after each compaction. 0 turns the measurement off; else 1s to 10m.")
	fs.DurationVar(&c.listIvl, "compaction.list-interval", time.Hour, "With --resources: interval between two timed full paginated LISTs (limit=500, metadata only) of the resource with the most objects, to set against the LIST horizon: objects/500 requests each time. 0 turns it off; else 1m to 24h.")
	fs.StringVar(&c.listenAddress, "web.listen-address", ":9890", "Address on which to expose metrics, /healthz, /readyz and the status page.")
	fs.StringVar(&c.probeAddress, "web.probe-address", "", "Address on which to serve /healthz and /readyz alone, in plain HTTP without auth, for kubelet probes when --web.config.file sets basic auth. Empty: the probes are served on --web.listen-address only.")
	fs.StringVar(&c.telemetryPath, "web.telemetry-path", "/metrics", "Path under which to expose metrics: a clean path of letters, digits and -._~/, none of /, /healthz, /readyz, /status.json.")
	fs.IntVar(&c.maxRequests, "web.max-requests", 10, "Maximum number of scrapes served at once, and of requests of the status page; more are answered 503. 0 means no limit.")
	fs.StringVar(&c.webConfigFile, "web.config.file", "", "Path to an exporter-toolkit web configuration file: TLS and basic auth for every path but those of --web.probe-address.")
	fs.StringVar(&c.logLevel, "log.level", "info", "Log level: debug, info, warn or error.")
	fs.StringVar(&c.logFormat, "log.format", "json", "Log format: json or text.")
	fs.BoolVar(&c.version, "version", false, "Print version information and exit.")
	// Defaults read from the environment, as the docs give them.
	_ = fs.SetAnnotation("kubeconfig", docDefault, []string{"in-cluster, then `$KUBECONFIG`, `~/.kube/config`"})
	_ = fs.SetAnnotation("namespace", docDefault, []string{"`$POD_NAMESPACE`, then the context's, then `default`"})
	return fs
}

// docDefault annotates a flag whose default depends on the environment.
const docDefault = "docs-default"

// Flag is one command-line flag, for the generated configuration docs.
type Flag struct{ Name, Default, Usage string }

// Flags are the exporter's flags in the order --help gives them.
func Flags() []Flag {
	var out []Flag
	newFlagSet(&config{}, io.Discard).VisitAll(func(f *pflag.Flag) {
		def := "`" + f.DefValue + "`"
		switch {
		case f.Annotations[docDefault] != nil:
			def = f.Annotations[docDefault][0]
		case f.DefValue == "":
			def = "none"
		}
		out = append(out, Flag{Name: f.Name, Default: def, Usage: f.Usage})
	})
	return out
}

// CheckFlags parses and checks args as Run does, without connecting: what
// the chart and manifests pass must start.
func CheckFlags(args []string) error {
	_, err := parseFlags(args, io.Discard)
	return err
}

// resourcesPace is how often each resource of --resources is measured.
func (c config) resourcesPace() resources.Pace {
	return resources.Pace{Interval: c.resourcesIvl, Budget: c.resourcesRate}
}

// cycleHook is onCycle for one apiserver; nil without onCycle.
func (c config) cycleHook(apiserver string) func(collector.Cycle) {
	if c.onCycle == nil {
		return nil
	}
	return func(cy collector.Cycle) { c.onCycle(apiserver, cy) }
}
