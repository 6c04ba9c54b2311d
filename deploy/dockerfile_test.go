package deploy_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// No Docker engine runs here: check instead that the image is built the way
// `make build` builds the binary, as a static, stamped, non-root binary.
func TestDockerfileMatchesMakefile(t *testing.T) {
	docker, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	xVars := regexp.MustCompile(`-X \$?\(?(PKG|github\.com/prometheus/common/version)\)?\.(\w+)=`)
	names := func(b []byte) []string {
		var out []string
		for _, m := range xVars.FindAllStringSubmatch(string(b), -1) {
			out = append(out, m[2])
		}
		slices.Sort(out)
		return out
	}
	if d, m := names(docker), names(mk); len(d) == 0 || !slices.Equal(d, m) {
		t.Errorf("version variables stamped: Dockerfile %v, Makefile %v", d, m)
	}
	if !strings.Contains(string(mk), "PKG     := github.com/prometheus/common/version") {
		t.Error("Makefile no longer stamps github.com/prometheus/common/version")
	}
	for _, want := range []string{"CGO_ENABLED=0 go build -trimpath", `-ldflags "-s -w `, "./cmd/watchcache-exporter",
		"FROM gcr.io/distroless/static", "USER 65532:65532", "ENTRYPOINT [\"/watchcache-exporter\"]"} {
		if !strings.Contains(string(docker), want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	for _, want := range []string{"CGO_ENABLED ?= 0", "-trimpath", "LDFLAGS := -s -w ", "./cmd/watchcache-exporter"} {
		if !strings.Contains(string(mk), want) {
			t.Errorf("Makefile lacks %q", want)
		}
	}
	// The image's user is the one the Deployment runs as.
	dep, err := os.ReadFile("base/deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(dep), "runAsUser: 65532") {
		t.Error("deploy/base/deployment.yaml does not run as 65532, the image's user")
	}
}
