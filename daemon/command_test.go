package daemon

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestCommand: run as the kubectl plugin, the binary has subcommands only,
// with kubectl's exit codes; run as the exporter, flags go to the daemon.
func TestCommand(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		prog   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"/usr/local/bin/kubectl-watchcache", nil, 0, "Usage: kubectl watchcache experiment", ""},
		{"kubectl-watchcache", []string{"--help"}, 0, "Usage: kubectl watchcache experiment", ""},
		{"kubectl-watchcache", []string{"--version"}, 0, "watchcache-exporter, version", ""},
		{"kubectl-watchcache", []string{"exporter"}, 1, "", `error: unknown command "exporter" for "kubectl watchcache"`},
		{"kubectl-watchcache", []string{"experiment", "--repeat=0"}, 2, "", "experiment: --repeat=0: must be between 1 and 100"},
		{"kubectl-watchcache", []string{"experiment", "--help"}, 0, "", "Usage: watchcache-exporter experiment"},
		{"watchcache-exporter", []string{"experiment", "--output=yaml"}, 2, "", `--output="yaml": want one of text, json, markdown`},
		{"watchcache-exporter", []string{"--probe.interval=0s"}, 2, "", "--probe.interval=0s"},
	} {
		var stdout, stderr bytes.Buffer
		code := Command(ctx, tc.prog, tc.args, &stdout, &stderr, false)
		if code != tc.code || !strings.Contains(stdout.String(), tc.stdout) || !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("%s %v: exit %d, want %d\nstdout (want %q):\n%s\nstderr (want %q):\n%s", tc.prog, tc.args, code, tc.code, tc.stdout, stdout.String(), tc.stderr, stderr.String())
		}
	}
}

// TestExperimentHelp hides the daemon's HTTP flags and gives the article's
// defaults.
func TestExperimentHelp(t *testing.T) {
	var stderr bytes.Buffer
	if code := RunExperiment(context.Background(), []string{"--help"}, &bytes.Buffer{}, &stderr, false); code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	help := stderr.String()
	for _, hidden := range notForExperiment {
		if strings.Contains(help, "--"+hidden+" ") {
			t.Errorf("--help shows --%s", hidden)
		}
	}
	for _, want := range []string{"--load.rate float", "(default 85)", "--timeout duration", "(default 10m0s)", "--repeat int", "--output string", "--namespace", "--resources"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q:\n%s", want, help)
		}
	}
}
