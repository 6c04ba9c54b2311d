package daemon

import (
	"io"
	"path/filepath"
	"strings"
	"testing"
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
		{args: []string{"--apiservers=discover"}},
		{args: []string{"--apiservers=https://10.0.0.1:6443,https://10.0.0.2:6443"}},
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

func TestRunExitsTwoOnBadFlag(t *testing.T) {
	var stderr strings.Builder
	if code := Run(t.Context(), []string{"--log.format=xml"}, io.Discard, &stderr); code != 2 {
		t.Errorf("exit status %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), "--log.format") {
		t.Errorf("stderr %q does not name the flag", stderr.String())
	}
}
