package main

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
	if code := run(t.Context(), []string{"--log.format=xml"}, io.Discard, &stderr); code != 2 {
		t.Errorf("exit status %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), "--log.format") {
		t.Errorf("stderr %q does not name the flag", stderr.String())
	}
}
