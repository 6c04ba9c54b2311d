// Command bench measures the exporter side by side with the article's
// method and the apiserver's own numbers, and writes docs/benchmarks.md.
// Run it with make bench (it builds bin/ first); it takes about 25 minutes.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/watchcache/watchcache-exporter/internal/owned"
	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

var (
	out       = flag.String("out", "docs/benchmarks.md", "report to write")
	loadDur   = flag.Duration("load-duration", 30*time.Second, "measuring time of each load-accuracy point")
	steadyDur = flag.Duration("steady-duration", 3*time.Minute, "measuring time of each footprint point")
	soakDur   = flag.Duration("soak-duration", 30*time.Minute, "length of the soak at 100 writes/s (0: none)")
	fakeAddr  = flag.String("fake-apiserver", "", "internal: serve fake patches on this address and exit")
	only      = flag.String("only", "", "run one part and put its sections into the existing report instead of writing a new one: load (sections 1 and 2), footprint (3 and 4), soak (5) or resources (6)")
)

const ns = "bench"

func main() {
	flag.Parse()
	if *fakeAddr != "" {
		serveFake(*fakeAddr)
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// cpu is a process's user+system CPU seconds, from /proc.
func cpu(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return math.NaN()
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / 100 // CLK_TCK is 100 on Linux
}

func rssMiB(pid int) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return math.NaN()
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return math.NaN()
}

type report struct {
	bytes.Buffer
	targets []string
}

func (r *report) target(met bool, what, figure string) {
	mark := "met"
	if !met {
		mark = "**not met**"
	}
	r.targets = append(r.targets, fmt.Sprintf("| %s | %s | %s |", what, figure, mark))
}

func run(ctx context.Context) error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	exe := filepath.Join(root, "bin", "watchcache-exporter")
	if _, err := os.Stat(exe); err != nil {
		return fmt.Errorf("%s: %w (make bench builds it)", exe, err)
	}
	c, err := testcluster.New(ctx, testcluster.Options{})
	if err != nil {
		return err
	}
	defer func() { c.Stop(); c.RemoveDir() }()
	cs := kubernetes.NewForConfigOrDie(c.AdminConfig())
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	kubeconfig := filepath.Join(c.Dir(), "kubeconfig")
	if err := testcluster.WriteKubeconfig(kubeconfig, c.AdminConfig()); err != nil {
		return err
	}
	var r report
	// An interrupted part measured less than it says: the report stays as
	// it was.
	interrupted := func() error {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted: %s left as it was", *out)
		}
		return nil
	}
	replace := func(sections string) error {
		if err := interrupted(); err != nil {
			return err
		}
		return replaceSections(*out, sections, r.targets)
	}
	switch *only {
	case "":
	case "footprint": // sections 3 and 4
		if err := footprint(ctx, &r, c, exe, kubeconfig); err != nil {
			return err
		}
		return replace(r.String())
	case "resources":
		if err := resourcesCost(ctx, &r, c, exe, kubeconfig); err != nil {
			return err
		}
		return replace(r.String())
	case "load": // sections 1 and 2
		if err := loadAccuracy(ctx, &r, c, cs, exe, kubeconfig); err != nil {
			return err
		}
		if err := ceiling(ctx, &r, exe); err != nil {
			return err
		}
		return replace("\n" + r.String())
	case "soak": // section 5
		if err := soak(ctx, &r, exe, kubeconfig); err != nil {
			return err
		}
		return replace(r.String())
	default:
		return fmt.Errorf("-only=%q: want load, footprint, soak or resources", *only)
	}
	fmt.Fprintf(&r, "# Benchmarks\n\nWritten by `make bench` (hack/bench) on %s, %s: a 2-core machine running the pinned kube-apiserver v1.37.2 and etcd v3.7.3 on loopback, the exporter as a separate process (`bin/watchcache-exporter`). CPU is user+system time from /proc, as %% of one core.\n\n",
		time.Now().UTC().Format("2006-01-02"), goVersion())

	if err := loadAccuracy(ctx, &r, c, cs, exe, kubeconfig); err != nil {
		return err
	}
	if err := ceiling(ctx, &r, exe); err != nil {
		return err
	}
	if err := footprint(ctx, &r, c, exe, kubeconfig); err != nil {
		return err
	}
	if err := soak(ctx, &r, exe, kubeconfig); err != nil {
		return err
	}
	if err := resourcesCost(ctx, &r, c, exe, kubeconfig); err != nil {
		return err
	}
	goBenchmarks(&r, root)

	var final bytes.Buffer
	fmt.Fprintf(&final, "%s", r.Bytes()[:bytes.Index(r.Bytes(), []byte("## 1."))])
	fmt.Fprintf(&final, "## Summary\n\n| target | measured | |\n|---|---|---|\n%s\n\n", strings.Join(r.targets, "\n"))
	final.Write(r.Bytes()[bytes.Index(r.Bytes(), []byte("## 1.")):])
	if err := interrupted(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	report := final.String()
	if old, err := os.ReadFile(*out); err == nil {
		report = keepOthers(string(old), report)
	}
	return os.WriteFile(*out, []byte(report), 0o644)
}

// keepOthers adds to report the sections of old ("## N. ...") that report
// has none of: those written by others than make bench (section 8, by a
// test), in their order, after report's.
func keepOthers(old, report string) string {
	for _, section := range strings.Split(old, "\n## ")[1:] {
		head := "## " + section[:strings.Index(section+"\n", "\n")]
		if i := strings.Index(head, ". "); i < 0 || strings.Contains(report, "\n"+head[:i+2]) {
			continue // not a numbered section (the summary), or written anew
		}
		report = strings.TrimRight(report, "\n") + "\n\n## " + strings.TrimRight(section, "\n") + "\n"
	}
	return report
}

func goVersion() string {
	b, _ := exec.Command("go", "env", "GOVERSION").Output()
	return strings.TrimSpace(string(b))
}

// exporterProc runs bin/watchcache-exporter with args until stop.
type exporterProc struct {
	cmd  *exec.Cmd
	addr string
}

func startExporter(exe, kubeconfig string, args ...string) (*exporterProc, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(exe, append([]string{"--kubeconfig=" + kubeconfig, "--namespace=" + ns, "--web.listen-address=" + addr, "--log.level=warn"}, args...)...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	e := &exporterProc{cmd: cmd, addr: addr}
	for i := 0; i < 300; i++ {
		if resp, err := http.Get("http://" + addr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return e, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.stop()
	return nil, errors.New("exporter not ready in 30 s")
}

func (e *exporterProc) stop() {
	_ = e.cmd.Process.Signal(syscall.SIGTERM)
	_ = e.cmd.Wait()
}

func (e *exporterProc) families() (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get("http://" + e.addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

func (e *exporterProc) metric(name string, labels ...string) float64 {
	fams, err := e.families()
	if err != nil {
		return math.NaN()
	}
	return value(fams, name, labels...)
}

// value is the sample of name with labels (name, value pairs) in fams; NaN
// when there is none.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	v, err := testcluster.Value(fams, name, want)
	if err != nil {
		return math.NaN()
	}
	return v
}

type window struct {
	t                       time.Time
	client, apiserver, etcd float64
	writes                  float64
}

func sampleCPU(c *testcluster.Cluster, clientCPU func() float64, writes func() float64) window {
	return window{t: time.Now(), client: clientCPU(), apiserver: cpu(c.APIServer().PID()), etcd: cpu(c.EtcdPID()), writes: writes()}
}

func pct(a, b window, f func(window) float64) float64 {
	return 100 * (f(b) - f(a)) / b.t.Sub(a.t).Seconds()
}

func loadAccuracy(ctx context.Context, r *report, c *testcluster.Cluster, cs kubernetes.Interface, exe, kubeconfig string) error {
	fmt.Fprintf(r, "## 1. Load accuracy and cost\n\nEach point: %s of load after a 10 s warm-up. Client CPU is the exporter's whole process (its probes included) or the sum of the `kubectl` processes; apiserver and etcd CPU is theirs over the same time.\n\n", *loadDur)
	fmt.Fprintln(r, "| writer | objects | target w/s | achieved w/s | achieved/target | client CPU s per 1000 writes | apiserver CPU % | etcd CPU % |")
	fmt.Fprintln(r, "|---|---|---|---|---|---|---|---|")
	worst := 0.0
	var worstAt string
	for _, objects := range []int{1, 8} {
		for _, rate := range []float64{25, 50, 100, 200} {
			e, err := startExporter(exe, kubeconfig, fmt.Sprintf("--load.rate=%v", rate), fmt.Sprintf("--load.objects=%d", objects))
			if err != nil {
				return err
			}
			time.Sleep(10 * time.Second)
			writes := func() float64 { return e.metric("watchcache_load_writes_total", "result", "ok") }
			clientCPU := func() float64 { return cpu(e.cmd.Process.Pid) }
			a := sampleCPU(c, clientCPU, writes)
			sleep(ctx, *loadDur)
			b := sampleCPU(c, clientCPU, writes)
			e.stop()
			achieved := (b.writes - a.writes) / b.t.Sub(a.t).Seconds()
			perK := 1000 * (b.client - a.client) / (b.writes - a.writes)
			fmt.Fprintf(r, "| exporter | %d | %v | %.2f | %.4f | %.3f | %.0f | %.0f |\n", objects, rate, achieved, achieved/rate, perK,
				pct(a, b, func(w window) float64 { return w.apiserver }), pct(a, b, func(w window) float64 { return w.etcd }))
			if objects == 8 && rate <= 100 {
				if d := math.Abs(achieved/rate - 1); d > worst {
					worst, worstAt = d, fmt.Sprintf("%v w/s", rate)
				}
			}
		}
	}
	r.target(worst <= 0.01, "Achieved rate within 1% of target where the apiserver keeps up (8 objects, 25–100 w/s)", fmt.Sprintf("worst %.2f%% off, at %s", 100*worst, worstAt))

	// The article's method: 8 concurrent loops of kubectl patch, paced.
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		fmt.Fprintln(r, "\nkubectl not on the PATH: the article's method was not measured.")
		return nil
	}
	for i := 0; i < 8; i++ {
		cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("kubectl-%d", i)}}, metav1.CreateOptions{})
	}
	for _, rate := range []float64{25, 50, 100, 200} {
		var mu sync.Mutex
		var n int
		var childCPU float64
		lctx, cancel := context.WithTimeout(ctx, *loadDur)
		a := sampleCPU(c, func() float64 { return 0 }, func() float64 { return 0 })
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Go(func() {
				interval := time.Duration(float64(time.Second) * 8 / rate)
				next := time.Now()
				for seq := 0; lctx.Err() == nil; seq++ {
					cmd := exec.Command(kubectl, "--kubeconfig", kubeconfig, "-n", ns, "patch", "configmap", fmt.Sprintf("kubectl-%d", i),
						"--type", "merge", "-p", fmt.Sprintf(`{"data":{"seq":"%d"}}`, seq))
					err := cmd.Run()
					mu.Lock()
					if err == nil {
						n++
					}
					if cmd.ProcessState != nil {
						childCPU += cmd.ProcessState.UserTime().Seconds() + cmd.ProcessState.SystemTime().Seconds()
					}
					mu.Unlock()
					next = next.Add(interval)
					sleep(lctx, time.Until(next))
				}
			})
		}
		wg.Wait()
		cancel()
		b := sampleCPU(c, func() float64 { return 0 }, func() float64 { return 0 })
		achieved := float64(n) / b.t.Sub(a.t).Seconds()
		fmt.Fprintf(r, "| 8 × kubectl patch | 8 | %v | %.2f | %.4f | %.3f | %.0f | %.0f |\n", rate, achieved, achieved/rate, 1000*childCPU/float64(n),
			pct(a, b, func(w window) float64 { return w.apiserver }), pct(a, b, func(w window) float64 { return w.etcd }))
	}
	fmt.Fprintln(r, "\nOne `kubectl patch` is a process start, a kubeconfig load, discovery (cached) and one PATCH: its client cost per write is what limits the article's method, not the apiserver.")
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// serveFake answers the load's requests like the apiserver does, with a fresh
// resourceVersion each time and the exporter's marks on every object, so
// that only the client's cost counts.
func serveFake(addr string) {
	var mu sync.Mutex
	rv := uint64(1000)
	http.ListenAndServe(addr, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		io.Copy(io.Discard, req.Body)
		parts := strings.Split(req.URL.Path, "/")
		name := parts[len(parts)-1]
		mu.Lock()
		rv++
		v := rv
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if req.Method == http.MethodGet || req.Method == http.MethodPost || req.Method == http.MethodPatch {
			json.NewEncoder(w).Encode(map[string]any{"kind": "ConfigMap", "apiVersion": "v1",
				"metadata": map[string]any{"name": name, "namespace": ns, "resourceVersion": strconv.FormatUint(v, 10),
					"labels":      map[string]string{owned.ManagedByLabel: owned.ManagedBy},
					"annotations": map[string]string{owned.OwnerAnnotation: ns + "/quiet"}}})
			return
		}
		w.WriteHeader(http.StatusNotFound)
	}))
}
