package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/watchcache/watchcache-exporter/daemon"
)

// krewPlugin is the part of krew's Plugin manifest that krew checks.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Caveats          string `json:"caveats"`
		Homepage         string `json:"homepage"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			SHA256 string `json:"sha256"`
			Bin    string `json:"bin"`
			Files  []struct {
				From, To string
			} `json:"files"`
		} `json:"platforms"`
	} `json:"spec"`
}

// TestKrewManifest: the plugin's manifest, filled in as make plugin-dist
// fills it, is one krew accepts, for the binary name kubectl runs and the
// archives make plugin-dist builds.
func TestKrewManifest(t *testing.T) {
	dir := root(t)
	raw, err := os.ReadFile(filepath.Join(dir, "krew", "watchcache.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile(filepath.Join(dir, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^PLUGIN_PLATFORMS := (.+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile: no PLUGIN_PLATFORMS")
	}
	platforms := strings.Fields(string(m[1]))
	filled := strings.ReplaceAll(string(raw), "VERSION", "v1.2.3")
	for _, p := range platforms {
		filled = strings.ReplaceAll(filled, "SHA256_"+p, strings.Repeat("ab", 32))
	}
	if strings.Contains(filled, "SHA256_") {
		t.Errorf("the manifest names a platform make plugin-dist does not build (%v)", platforms)
	}
	var k krewPlugin
	if err := yaml.UnmarshalStrict([]byte(filled), &k); err != nil {
		t.Fatalf("krew/watchcache.yaml: %v", err)
	}
	if k.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || k.Kind != "Plugin" {
		t.Errorf("apiVersion %q, kind %q", k.APIVersion, k.Kind)
	}
	if "kubectl-"+k.Metadata.Name != daemon.PluginName || k.Spec.Version != "v1.2.3" {
		t.Errorf("name %q, version %q", k.Metadata.Name, k.Spec.Version)
	}
	if n := len(k.Spec.ShortDescription); n == 0 || n > 60 {
		t.Errorf("shortDescription of %d characters", n)
	}
	var seen []string
	for _, p := range k.Spec.Platforms {
		goos, arch := p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"]
		seen = append(seen, goos+"_"+arch)
		if !strings.HasSuffix(p.URI, "/kubectl-watchcache_v1.2.3_"+goos+"_"+arch+".tar.gz") || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(p.SHA256) {
			t.Errorf("%s/%s: uri %s, sha256 %s", goos, arch, p.URI, p.SHA256)
		}
		var from []string
		for _, f := range p.Files {
			from = append(from, f.From)
		}
		if p.Bin != daemon.PluginName || !slices.Contains(from, daemon.PluginName) || !slices.Contains(from, "LICENSE") {
			t.Errorf("%s/%s: bin %q, files %v", goos, arch, p.Bin, from)
		}
	}
	slices.Sort(seen)
	slices.Sort(platforms)
	if !slices.Equal(seen, platforms) {
		t.Errorf("manifest platforms %v, make plugin-dist builds %v", seen, platforms)
	}
}
