package daemon

import (
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/watchcache/watchcache-exporter/load"
)

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string // substring; "" means valid
	}{
		{args: nil},
		{args: []string{"--log.format=text", "--log.level=debug", "--web.telemetry-path=/m"}},
		{args: []string{"--log.format=xml"}, wantErr: `--log.format="xml"`},
		{args: []string{"--log.level=verbose"}, wantErr: `--log.level="verbose"`},
		{args: []string{"--web.telemetry-path=metrics"}, wantErr: "--web.telemetry-path"},
		{args: []string{"--web.telemetry-path=/"}, wantErr: "--web.telemetry-path"},
		{args: []string{"--web.telemetry-path=/healthz"}, wantErr: `--web.telemetry-path="/healthz": is one of the exporter's own paths`},
		{args: []string{"--web.telemetry-path=/readyz"}, wantErr: "--web.telemetry-path"},
		{args: []string{"--web.telemetry-path=/status.json"}, wantErr: "--web.telemetry-path"},
		{args: []string{"--web.telemetry-path=/m/{x}"}, wantErr: `--web.telemetry-path="/m/{x}": '{': want letters`},
		{args: []string{"--web.telemetry-path=/a b"}, wantErr: "--web.telemetry-path"},
		{args: []string{"--web.telemetry-path=/m/../x"}, wantErr: "not a clean path"},
		{args: []string{"--web.telemetry-path=/m/"}, wantErr: "not a clean path"},
		{args: []string{"--web.telemetry-path=/prom/metrics_v1"}},
		{args: []string{"--apiserver.history-window=2h"}, wantErr: "--apiserver.history-window=2h0m0s: at most 1h"},
		{args: []string{"--load.schedule=1:2562047h,1:2562047h"}, wantErr: "--load.schedule: the steps last longer than 168h"},
		{args: []string{"--web.listen-address="}, wantErr: "--web.listen-address"},
		{args: []string{"--web.config.file=" + filepath.Join(t.TempDir(), "nope.yml")}, wantErr: "--web.config.file"},
		{args: []string{"--kubeconfig=" + filepath.Join(t.TempDir(), "nope")}, wantErr: "--kubeconfig"},
		{args: []string{"--no-such-flag"}, wantErr: "no-such-flag"},
		{args: []string{"--load.rate=0"}},
		{args: []string{"--load.rate=-1"}, wantErr: "--load.rate: rate -1: must be"},
		{args: []string{"--load.rate=501"}, wantErr: "--load.rate: rate 501 is above the cap of 500 writes/s (--load.max-rate)"},
		{args: []string{"--load.rate=900", "--load.max-rate=1000"}},
		{args: []string{"--load.max-rate=0"}, wantErr: "--load.max-rate=0: must be a positive"},
		{args: []string{"--load.max-rate=1e300"}, wantErr: "--load.max-rate=1e+300: must be at most"},
		{args: []string{"--load.objects=0"}, wantErr: "--load.objects=0: must be between"},
		{args: []string{"--load.schedule=40:5m,100:5m"}},
		{args: []string{"--load.schedule=sweep:10:400:6:3m"}},
		{args: []string{"--load.schedule=40:5m,100:5x"}, wantErr: `--load.schedule="40:5m,100:5x": step 2 "100:5x": bad duration "5x"`},
		{args: []string{"--load.schedule=40:5m,900:5m"}, wantErr: "--load.schedule: step 2: rate 900 is above the cap of 500 writes/s (--load.max-rate)"},
		{args: []string{"--load.schedule=40:5m", "--load.rate=3"}, wantErr: "--load.rate and --load.schedule: set one of them"},
		{args: []string{"--probe.interval=10ms"}, wantErr: "--probe.interval=10ms"},
		{args: []string{"--namespace=Bad_NS"}, wantErr: `--namespace="Bad_NS"`},
		{args: []string{"--quiet.name=x..y"}, wantErr: `--quiet.name="x..y"`},
		{args: []string{"--noise.prefix="}, wantErr: `--noise.prefix=""`},
		{args: []string{"--noise.prefix=q-", "--quiet.name=q-3"}, wantErr: `--quiet.name="q-3" is one of the noise objects`},
		{args: []string{"--apiserver.history-window=60s"}, wantErr: "--apiserver.history-window=1m0s"},
		{args: []string{"--apiserver.history-window=135s"}},
		{args: []string{"--resources=all", "--load.rate=0"}},
		{args: []string{"--resources=pods,leases.coordination.k8s.io,endpointslices.discovery.k8s.io"}},
		{args: []string{"--resources=pods,pods"}, wantErr: `--resources="pods,pods": "pods" is listed twice`},
		{args: []string{"--resources=pods,all"}, wantErr: `"all" stands alone`},
		{args: []string{"--resources=pods/status"}, wantErr: `"pods/status": subresources have no watch cache`},
		{args: []string{"--resources=Pods"}, wantErr: `--resources="Pods": "Pods": want resource or resource.group`},
		{args: []string{"--resources=pods,"}, wantErr: "--resources=\"pods,\": an empty name"},
		{args: []string{"--resources=leases.coordination..k8s.io"}, wantErr: `group "coordination..k8s.io"`},
		{args: []string{"--resources=pods", "--resources.interval=500ms"}, wantErr: "--resources.interval=500ms: must be between 1s and 10m"},
		{args: []string{"--resources=pods", "--resources.interval=1h"}, wantErr: "--resources.interval=1h0m0s"},
		{args: []string{"--resources=all", "--resources.budget=0"}, wantErr: "--resources.budget=0: must be between 1 and 1000"},
		{args: []string{"--resources=all", "--resources.budget=NaN"}, wantErr: "--resources.budget=NaN"},
		{args: []string{"--resources=all", "--resources.rediscover=1s"}, wantErr: "--resources.rediscover=1s: must be between 10s and 1h"},
		{args: []string{"--apiservers=discover"}},
		{args: []string{"--apiservers=https://10.0.0.1:6443,https://10.0.0.2:6443"}},
		{args: []string{"--apiservers=discover", "--apiservers.grace-period=0"}},
		{args: []string{"--apiservers=discover", "--apiservers.grace-period=-1s"}, wantErr: "--apiservers.grace-period=-1s: must be between 0s and 1h"},
		{args: []string{"--apiservers.grace-period=2h"}, wantErr: "--apiservers.grace-period=2h0m0s"},
		{args: []string{"--apiservers=10.0.0.1"}, wantErr: `--apiservers: "10.0.0.1": want https://host:port`},
		{args: []string{"extra"}, wantErr: `unexpected argument "extra"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := parseFlags(tc.args, io.Discard)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("no error, want one naming %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("error %q does not name %q", err, tc.wantErr)
			}
		})
	}
}

// TestKubeconfigContext: --context picks a context of the kubeconfig, and the
// namespace follows kubectl's: the flag, else the context's, else default;
// $POD_NAMESPACE (the Deployment's) comes before the context.
func TestKubeconfigContext(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
current-context: team
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1"}
- name: c2
  cluster: {server: "https://127.0.0.2:2"}
users:
- name: u
  user: {token: t}
contexts:
- name: team
  context: {cluster: c, user: u, namespace: team-a}
- name: other
  context: {cluster: c2, user: u, namespace: team-b}
- name: bare
  context: {cluster: c, user: u}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("POD_NAMESPACE", "")
	for _, tc := range []struct {
		args    []string
		env     string // $POD_NAMESPACE
		wantNS  string
		wantErr string
	}{
		{wantNS: "team-a"},
		{args: []string{"--context=other"}, wantNS: "team-b"},
		{args: []string{"--context=bare"}, wantNS: "default"},
		{args: []string{"--context=other", "-n", "mine"}, wantNS: "mine"},
		{args: []string{"--namespace=mine"}, wantNS: "mine"},
		{env: "pod-ns", wantNS: "pod-ns"},
		{args: []string{"--context=nope"}, wantErr: `--context="nope": no such context in the kubeconfig (it has: bare, other, team)`},
		{args: []string{"--context=nope", "-n", "mine"}, wantErr: `--context="nope"`},
	} {
		t.Run(strings.Join(append(tc.args, tc.env), " "), func(t *testing.T) {
			t.Setenv("POD_NAMESPACE", tc.env)
			c, err := parseFlags(append([]string{"--kubeconfig=" + kubeconfig}, tc.args...), io.Discard)
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one naming %q", err, tc.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case c.namespace != tc.wantNS:
				t.Errorf("namespace %q, want %q", c.namespace, tc.wantNS)
			}
		})
	}
	// The connection follows the context too.
	c, err := parseFlags([]string{"--kubeconfig=" + kubeconfig, "--context=other"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := restConfig(c.kubeconfig, c.context)
	if err != nil {
		t.Fatal(err)
	}
	if rc.BearerToken != "t" || rc.Host != "https://127.0.0.2:2" {
		t.Errorf("rest config host %q token %q, want context other's", rc.Host, rc.BearerToken)
	}
}

func TestRunExitsTwoOnBadFlag(t *testing.T) {
	var stderr strings.Builder
	if code := Run(t.Context(), []string{"--log.format=xml"}, io.Discard, &stderr); code != 2 {
		t.Errorf("exit status %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), "--log.format") {
		t.Errorf("stderr %q does not name the flag", stderr.String())
	}
}

// FuzzParseFlags feeds whole command lines (arguments separated by NUL) to
// the flag parser: no input may panic it, and whatever it accepts builds a
// mux, a load config and a schedule that can be walked without panicking.
func FuzzParseFlags(f *testing.F) {
	for _, s := range []string{
		"",
		"--load.rate=40\x00--load.max-rate=100",
		"--load.schedule=sweep:10:400:6:3m",
		"--load.schedule=1:2562047h,1:2562047h",
		"--web.telemetry-path=/m/{x}",
		"--web.telemetry-path=/healthz",
		"--apiserver.history-window=1h\x00--probe.interval=100ms",
		"--load.objects=1000\x00--noise.prefix=n-\x00--quiet.name=n-q",
		"--apiservers=https://[::1]:6443,https://127.0.0.1:6443",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		var args []string
		if line != "" {
			args = strings.Split(line, "\x00")
		}
		cfg, err := parseFlags(args, io.Discard)
		if err != nil {
			return
		}
		if err := cfg.loadConfig().Validate(); err != nil {
			t.Fatalf("%q: parsed, but the load config does not validate: %v", args, err)
		}
		for _, at := range []time.Duration{0, time.Hour, math.MaxInt64} {
			cfg.schedule.At(at)
		}
		load.Workers(cfg.schedule.Max())
		load.ClientQPS(cfg.loadMaxRate)
		reg := prometheus.NewRegistry()
		newMux(cfg, reg, func() error { return nil }, http.NotFoundHandler())
	})
}
