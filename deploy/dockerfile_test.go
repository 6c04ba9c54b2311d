package deploy_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/watchcache/watchcache-exporter/test/testcluster"
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

// TestImageMatchesDockerfile compares the image `make image` builds without
// an engine with the Dockerfile's final stage: the same user, entrypoint,
// exposed port and labels, and one layer that holds only the binary.
func TestImageMatchesDockerfile(t *testing.T) {
	testcluster.Real(t)
	archive := filepath.Join("..", "bin", "watchcache-exporter-image.tar")
	if _, err := os.Stat(archive); err != nil {
		testcluster.Missing(t, archive+" is missing; build it with make image")
	}
	docker, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	want := finalStage(t, string(docker))
	files := readTar(t, archive)
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		t.Fatalf("manifest.json: %v (%d images)", err, len(manifest))
	}
	var cfg struct {
		Architecture, OS string
		Config           struct {
			User         string
			Entrypoint   []string
			Cmd          []string
			ExposedPorts map[string]struct{}
			Labels       map[string]string
		}
	}
	if err := json.Unmarshal(files[manifest[0].Config], &cfg); err != nil {
		t.Fatal(err)
	}
	got := cfg.Config
	if got.User != want.user {
		t.Errorf("user: image %q, Dockerfile %q", got.User, want.user)
	}
	if !slices.Equal(got.Entrypoint, want.entrypoint) || len(got.Cmd) != 0 {
		t.Errorf("entrypoint: image %q (cmd %q), Dockerfile %q", got.Entrypoint, got.Cmd, want.entrypoint)
	}
	if ports := slices.Sorted(maps.Keys(got.ExposedPorts)); !slices.Equal(ports, want.ports) {
		t.Errorf("exposed ports: image %v, Dockerfile %v", ports, want.ports)
	}
	if keys := slices.Sorted(maps.Keys(got.Labels)); !slices.Equal(keys, slices.Sorted(maps.Keys(want.labels))) {
		t.Errorf("label keys: image %v, Dockerfile %v", keys, slices.Sorted(maps.Keys(want.labels)))
	}
	for k, v := range want.labels {
		if strings.Contains(v, "${") {
			if got.Labels[k] == "" || got.Labels[k] == "unknown" {
				t.Errorf("label %s: image %q, want the build's value of %s", k, got.Labels[k], v)
			}
		} else if got.Labels[k] != v {
			t.Errorf("label %s: image %q, Dockerfile %q", k, got.Labels[k], v)
		}
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" {
		t.Errorf("platform %s/%s, want linux/amd64", cfg.OS, cfg.Architecture)
	}
	if len(manifest[0].Layers) != 1 {
		t.Fatalf("%d layers, want 1", len(manifest[0].Layers))
	}
	layer, err := gzip.NewReader(bytes.NewReader(files[manifest[0].Layers[0]]))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(layer)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, "/"+h.Name)
		if h.Typeflag == tar.TypeReg && h.Mode&0o111 == 0 {
			t.Errorf("%s is not executable", h.Name)
		}
	}
	if !slices.Equal(names, want.entrypoint[:1]) {
		t.Errorf("layer holds %v, want only %v", names, want.entrypoint[:1])
	}
}

type stage struct {
	user       string
	entrypoint []string
	ports      []string
	labels     map[string]string
}

// finalStage reads USER, ENTRYPOINT, EXPOSE and LABEL of the last FROM.
func finalStage(t *testing.T, dockerfile string) stage {
	t.Helper()
	dockerfile = strings.ReplaceAll(dockerfile, "\\\n", " ")
	s := stage{labels: map[string]string{}}
	label := regexp.MustCompile(`([\w.-]+)="([^"]*)"`)
	for _, line := range strings.Split(dockerfile, "\n") {
		instr, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest = strings.TrimSpace(rest)
		switch instr {
		case "FROM":
			s = stage{labels: map[string]string{}}
		case "USER":
			s.user = rest
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &s.entrypoint); err != nil {
				t.Fatalf("ENTRYPOINT %s: %v", rest, err)
			}
		case "EXPOSE":
			for _, p := range strings.Fields(rest) {
				if !strings.Contains(p, "/") {
					p += "/tcp"
				}
				s.ports = append(s.ports, p)
			}
		case "LABEL":
			for _, m := range label.FindAllStringSubmatch(rest, -1) {
				s.labels[m[1]] = m[2]
			}
		}
	}
	slices.Sort(s.ports)
	if s.user == "" || len(s.entrypoint) == 0 || len(s.ports) == 0 || len(s.labels) == 0 {
		t.Fatalf("Dockerfile's final stage lacks USER, ENTRYPOINT, EXPOSE or LABEL: %+v", s)
	}
	return s
}

func readTar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = b
	}
}
