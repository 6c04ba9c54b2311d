// Package exportertest runs the exporter in the test's process against a
// testcluster, and reads its /metrics, for the tests of several packages.
package exportertest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"

	"github.com/watchcache/watchcache-exporter/daemon"
	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

// Exporter is exporter.Run serving on a free loopback port, in the test's
// process (Start) or in a child process (StartProcess).
type Exporter struct {
	Addr   string
	cancel context.CancelFunc
	cmd    *exec.Cmd // of StartProcess
	done   chan int
	logs   *SyncBuffer
}

// childEnv marks a test binary re-executed by StartProcess: it runs the
// exporter instead of the tests.
const childEnv = "WATCHCACHE_EXPORTER_CHILD"

// runChildIfAsked runs the exporter as cmd/watchcache-exporter does, and
// exits, when this test binary is a child of StartProcess (Main calls it).
func runChildIfAsked() {
	if os.Getenv(childEnv) != "1" {
		return
	}
	ctx, stop := daemon.SignalContext()
	code := daemon.Command(ctx, os.Args[0], os.Args[1:], os.Stdout, os.Stderr, false)
	stop()
	os.Exit(code)
}

// Command is the exporter's command line with args, in a child process:
// this test binary run again (see runChildIfAsked).
func Command(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	return cmd
}

// PluginPath is a $PATH under which kubectl finds this test binary as the
// kubectl-watchcache plugin, followed by the test's own $PATH; set
// ChildEnv in the plugin's environment (kubectl passes its own on).
func PluginPath(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Symlink(os.Args[0], filepath.Join(dir, daemon.PluginName)); err != nil {
		t.Fatal(err)
	}
	return dir + string(os.PathListSeparator) + os.Getenv("PATH")
}

// ChildEnv is the environment entry that makes this test binary the
// exporter's command line.
const ChildEnv = childEnv + "=1"

// Main runs the tests of a package that starts exporters, from its
// TestMain: os.Exit(exportertest.Main(m)). In StartProcess's child it runs
// the exporter instead. Otherwise it routes klog to stderr before any test
// starts: the exporters run in this process and route klog once, which
// would race with the clients of tests already running beside them.
func Main(m *testing.M) int {
	runChildIfAsked()
	daemon.RouteKlog(slog.NewTextHandler(os.Stderr, nil))
	return m.Run()
}

// StartProcess runs the exporter in a child process, the test binary run
// again (see runChildIfAsked), so that a test can kill it with SIGKILL.
func StartProcess(t *testing.T, cfg *rest.Config, args ...string) *Exporter {
	t.Helper()
	addr := FreeAddr(t)
	e := &Exporter{Addr: addr, cancel: func() {}, done: make(chan int, 1), logs: &SyncBuffer{}}
	args = append([]string{"--kubeconfig=" + kubeconfig(t, cfg), "--web.listen-address=" + addr, "--log.format=text"}, args...)
	e.cmd = Command(args...)
	e.cmd.Stdout, e.cmd.Stderr = e.logs, e.logs
	if err := e.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = e.cmd.Wait()
		e.done <- e.cmd.ProcessState.ExitCode() // -1 when killed
	}()
	t.Cleanup(func() {
		defer func() { _ = e.cmd.Process.Kill() }() // if Stop timed out
		e.Stop(t)
		if t.Failed() {
			t.Logf("exporter process %v log:\n%s", args[2:], e.logs.String())
		}
	})
	return e
}

// Kill sends SIGKILL to a StartProcess exporter and waits for it to die.
func (e *Exporter) Kill(t *testing.T) {
	t.Helper()
	if err := e.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	code := <-e.done
	e.done <- code
}

// Logs is what the exporter has logged so far.
func (e *Exporter) Logs() string { return e.logs.String() }

// Start runs the exporter with cfg's credentials and args, and stops it when
// the test ends (printing its log if the test failed). It does not wait for
// readiness: see WaitReady.
func Start(t *testing.T, cfg *rest.Config, args ...string) *Exporter {
	t.Helper()
	addr := FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	e := &Exporter{Addr: addr, cancel: cancel, done: make(chan int, 1), logs: &SyncBuffer{}}
	args = append([]string{"--kubeconfig=" + kubeconfig(t, cfg), "--web.listen-address=" + addr, "--log.format=text"}, args...)
	go func() { e.done <- daemon.Run(ctx, args, io.Discard, e.logs) }()
	t.Cleanup(func() {
		e.Stop(t)
		if t.Failed() {
			t.Logf("exporter %v log:\n%s", args[2:], e.logs.String())
		}
	})
	return e
}

// CheckMetrics runs promtool check metrics on the exporter's real /metrics.
func (e *Exporter) CheckMetrics(t *testing.T) {
	t.Helper()
	testcluster.Real(t)
	bin, err := exec.LookPath("promtool")
	if err != nil {
		testcluster.Missing(t, "promtool not found; install Debian's prometheus package with `make prometheus` (make test does)")
	}
	resp, err := http.Get("http://" + e.Addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = resp.Body
	out, err := cmd.CombinedOutput()
	t.Logf("promtool check metrics: %q", out)
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// StartReady is Start, then WaitReady for up to 30 s.
func StartReady(t *testing.T, cfg *rest.Config, args ...string) *Exporter {
	t.Helper()
	e := Start(t, cfg, args...)
	e.WaitReady(t, 30*time.Second)
	return e
}

// WaitReady waits until /readyz answers 200.
func (e *Exporter) WaitReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	e.WaitFor(t, timeout, "exporter ready", func(Metrics) bool { return e.Ready() })
}

// Stop cancels Run's context, or sends SIGTERM to the process, and returns
// its exit status.
func (e *Exporter) Stop(t *testing.T) int {
	e.cancel()
	if e.cmd != nil && e.cmd.Process != nil {
		_ = e.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case code := <-e.done:
		e.done <- code
		return code
	case <-time.After(30 * time.Second):
		t.Fatal("exporter did not stop within 30 s")
		return -1
	}
}

// Ready says whether /readyz answers 200.
func (e *Exporter) Ready() bool {
	resp, err := http.Get("http://" + e.Addr + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Scrape reads /metrics.
func (e *Exporter) Scrape(t *testing.T) Metrics {
	t.Helper()
	m, err := e.TryScrape()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TryScrape reads /metrics, or says why it could not.
func (e *Exporter) TryScrape() (Metrics, error) {
	resp, err := http.Get("http://" + e.Addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// WaitFor scrapes every half second until cond holds, failing the test when
// timeout passes or the exporter exits.
func (e *Exporter) WaitFor(t *testing.T, timeout time.Duration, what string, cond func(Metrics) bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		select {
		case code := <-e.done:
			e.done <- code
			t.Fatalf("exporter exited with status %d while waiting for %s", code, what)
		default:
		}
		m, err := e.TryScrape()
		if err == nil && cond(m) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %s (last scrape error: %v)", what, timeout, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// RunToExit runs the exporter until it exits (at most a minute), for
// failures at start; it returns the exit status and the log.
func RunToExit(t *testing.T, cfg *rest.Config, args ...string) (int, string) {
	t.Helper()
	var out SyncBuffer
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	code := daemon.Run(ctx, append([]string{"--kubeconfig=" + kubeconfig(t, cfg), "--web.listen-address=127.0.0.1:0"}, args...), io.Discard, &out)
	return code, out.String()
}

func kubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := testcluster.WriteKubeconfig(path, cfg); err != nil {
		t.Fatal(err)
	}
	return path
}

// Metrics are scraped metric families.
type Metrics map[string]*dto.MetricFamily

// Get is the one sample of name whose labels include the pairs given.
func (m Metrics) Get(name string, labelPairs ...string) (float64, error) {
	want := map[string]string{}
	for i := 0; i+1 < len(labelPairs); i += 2 {
		want[labelPairs[i]] = labelPairs[i+1]
	}
	return testcluster.Value(m, name, want)
}

// Value is Get, failing the test when there is no such sample.
func (m Metrics) Value(t *testing.T, name string, labelPairs ...string) float64 {
	t.Helper()
	v, err := m.Get(name, labelPairs...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Sum adds every sample of a counter or gauge family.
func (m Metrics) Sum(t *testing.T, name string) float64 {
	t.Helper()
	fam, ok := m[name]
	if !ok {
		t.Fatalf("metric %s not exposed", name)
	}
	s := 0.0
	for _, x := range fam.GetMetric() {
		s += x.GetCounter().GetValue() + x.GetGauge().GetValue()
	}
	return s
}

// Samples groups the nonzero samples of a family by the value of one label,
// then by the other labels, for assertions on sets and for messages.
func (m Metrics) Samples(name, by string) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for _, x := range m[name].GetMetric() {
		v := x.GetCounter().GetValue() + x.GetGauge().GetValue()
		if v == 0 {
			continue
		}
		var key string
		var rest []string
		for _, l := range x.GetLabel() {
			if l.GetName() == by {
				key = l.GetValue()
			} else {
				rest = append(rest, l.GetName()+"="+l.GetValue())
			}
		}
		if out[key] == nil {
			out[key] = map[string]float64{}
		}
		out[key][strings.Join(rest, ",")] = v
	}
	return out
}

// FreeAddr is a free loopback address.
func FreeAddr(t *testing.T) string {
	t.Helper()
	port, err := testcluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// SyncBuffer is a strings.Builder safe for concurrent writes.
type SyncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
