// Package promtest runs Debian's Prometheus server for a test and queries it
// through its HTTP API.
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
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/watchcache/watchcache-exporter/internal/testcluster"
)

// Server is a running Prometheus.
type Server struct {
	// Base is its http://host:port.
	Base string
}

// Start runs Prometheus with the configuration cfg (native histograms on)
// until t ends, and waits for it to be ready. Without the binary the test is
// skipped, or failed with $WATCHCACHE_REQUIRE_KUBE=1.
func Start(t *testing.T, cfg string) Server {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		testcluster.Missing(t, "prometheus not found; install Debian's prometheus package with `make prometheus` (make test does)")
	}
	return StartBinary(t, bin, cfg)
}

// StartBinary is Start with the server binary bin.
func StartBinary(t *testing.T, bin, cfg string) Server {
	t.Helper()
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
	cmd := exec.Command(bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--enable-feature=native-histograms")
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
	p := Server{Base: "http://" + addr}
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
