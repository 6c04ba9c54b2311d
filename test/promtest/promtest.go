// Package promtest runs a real Prometheus server for a test, Debian's 2.42
// or the 3.x that hack/prometheus builds, and queries it through its HTTP
// API.
package promtest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

// Server is a running Prometheus.
type Server struct {
	// Base is its http://host:port.
	Base string
	// Version is what its --version says, e.g. 2.42.0.
	Version string
}

// Binary is a Prometheus server or promtool of one version.
type Binary struct {
	Name string // "Debian 2.42.0", "module 3.16.0"
	Path string
}

// Servers are the Prometheus servers the dashboards and rules are tested
// on: Debian's 2.42 (make prometheus) and the 3.x built from the module
// go.mod pins (make e2e-bin). A missing one skips the test, or fails it
// with $WATCHCACHE_REQUIRE_KUBE=1.
func Servers(t *testing.T) []Binary { return binaries(t, "prometheus") }

// Promtools are the promtools of Servers' versions.
func Promtools(t *testing.T) []Binary { return binaries(t, "promtool") }

func binaries(t *testing.T, name string) []Binary {
	t.Helper()
	testcluster.Real(t)
	debian, err := exec.LookPath(name)
	if err != nil {
		testcluster.Missing(t, name+" not found; install Debian's prometheus package with `make prometheus` (make test does)")
	}
	root, err := testcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	built := filepath.Join(root, "bin", name)
	if _, err := os.Stat(built); err != nil {
		testcluster.Missing(t, "bin/"+name+" not found; build Prometheus 3 with `make e2e-bin` (make test does)")
	}
	return []Binary{{Name: "Debian " + version(t, debian), Path: debian}, {Name: "module " + version(t, built), Path: built}}
}

// version is the X.Y.Z that bin --version reports.
func version(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", bin, err, out)
	}
	m := versionRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("%s --version: no version in %q", bin, out)
	}
	return string(m[1])
}

var versionRE = regexp.MustCompile(`version (\d+\.\d+\.\d+)`)

// StartBinary runs the Prometheus server bin with the configuration cfg
// until t ends, and waits for it to be ready. Native histograms are
// turned on as the version wants it: 2.x by a feature flag, 3.x by
// scrape_native_histograms in the global configuration (from 3.8 on the
// flag does nothing; older 3.x are not tested here).
func StartBinary(t *testing.T, bin, cfg string) Server {
	t.Helper()
	ver := version(t, bin)
	flags := []string{"--enable-feature=native-histograms"}
	if !strings.HasPrefix(ver, "2.") {
		flags = nil
		var c map[string]any
		if err := yaml.Unmarshal([]byte(cfg), &c); err != nil {
			t.Fatalf("prometheus configuration: %v", err)
		}
		g, _ := c["global"].(map[string]any)
		if g == nil {
			g = map[string]any{}
		}
		g["scrape_native_histograms"] = true
		c["global"] = g
		b, err := yaml.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		cfg = string(b)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	port, err := testcluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{
		"--config.file=" + filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr}, flags...)...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("prometheus log:\n%s", b)
		}
	})
	p := Server{Base: "http://" + addr, Version: ver}
	for i := 0; ; i++ {
		resp, err := http.Get(p.Base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if i > 150 {
			t.Fatalf("prometheus not ready: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Get calls an API path and returns its data, failing t on an error answer.
func (p Server) Get(t *testing.T, path string, params url.Values) json.RawMessage {
	t.Helper()
	data, err := p.TryGet(path, params)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TryGet is Get that returns the error.
func (p Server) TryGet(path string, params url.Values) (json.RawMessage, error) {
	resp, err := http.Get(p.Base + path + "?" + params.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("%s %v: %s", path, params, body.Error)
	}
	return body.Data, nil
}

// Sample is one series of an instant query's result.
type Sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// Float is the sample's value.
func (s Sample) Float() float64 {
	var f float64
	if str, ok := s.Value[1].(string); ok {
		fmt.Sscan(str, &f)
	}
	return f
}

// Query runs an instant query and returns its series.
func (p Server) Query(t *testing.T, q string) []Sample {
	t.Helper()
	var data struct {
		Result []Sample `json:"result"`
	}
	if err := json.Unmarshal(p.Get(t, "/api/v1/query", url.Values{"query": {q}}), &data); err != nil {
		t.Fatal(err)
	}
	return data.Result
}

// LabelValues returns the values of label in the series that match selector.
func (p Server) LabelValues(t *testing.T, label, selector string) []string {
	t.Helper()
	var vals []string
	if err := json.Unmarshal(p.Get(t, "/api/v1/label/"+label+"/values", url.Values{"match[]": {selector}}), &vals); err != nil {
		t.Fatal(err)
	}
	return vals
}

// WaitFor polls q every 2 s until it returns a series, and returns the first;
// it fails t after timeout.
func (p Server) WaitFor(t *testing.T, q string, timeout time.Duration) Sample {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if res := p.Query(t, q); len(res) > 0 {
			return res[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no series after %s: %s", timeout, q)
		}
		time.Sleep(2 * time.Second)
	}
}
