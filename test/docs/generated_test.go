package docs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/watchcache/watchcache-exporter/daemon"
	"github.com/watchcache/watchcache-exporter/test/families"
)

// updateEnv, when "1", makes TestGeneratedDocs rewrite the generated parts
// instead of comparing them (make docs).
const updateEnv = "WATCHCACHE_UPDATE_DOCS"

// stable are the series whose name, labels and meaning only a major release
// changes (CHANGELOG.md); every other series is EXPERIMENTAL.
var stable = []string{
	"watchcache_cache_resets_total",
	"watchcache_expiry_cycles_total",
	"watchcache_expiry_seconds",
	"watchcache_exporter_build_info",
	"watchcache_exporter_leader",
	"watchcache_first_bookmark_seconds",
	"watchcache_fleet_window_lower_bound",
	"watchcache_fleet_window_seconds",
	"watchcache_window_lower_bound",
	"watchcache_window_seconds",
}

// The parts of the docs that the code generates: the flags table from the
// real flag set, the metrics reference from the exporter's real registry.
func TestGeneratedDocs(t *testing.T) {
	fams, err := families.All()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range stable {
		if !slices.ContainsFunc(fams, func(f families.Family) bool { return f.Name == name }) {
			t.Errorf("%s is marked STABLE but the exporter does not register it", name)
		}
	}
	update := os.Getenv(updateEnv) == "1"
	for _, g := range []struct{ file, section, content string }{
		{"docs/configuration.md", "flags", flagsTable()},
		{"docs/metrics.md", "metrics", metricsReference(fams)},
	} {
		path := filepath.Join(root(t), g.file)
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		begin, end := "<!-- BEGIN GENERATED: "+g.section+" -->\n", "<!-- END GENERATED: "+g.section+" -->"
		i, j := strings.Index(string(text), begin), strings.Index(string(text), end)
		if i < 0 || j < i {
			t.Errorf("%s: no %q ... %q markers", g.file, begin, end)
			continue
		}
		want := string(text[:i+len(begin)]) + g.content + string(text[j:])
		switch {
		case want == string(text):
		case update:
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %s rewritten", g.file, g.section)
		default:
			t.Errorf("%s: the %s part differs from what the code generates; run make docs", g.file, g.section)
		}
	}
}

func flagsTable() string {
	var b strings.Builder
	b.WriteString("| flag | default | meaning |\n|---|---|---|\n")
	for _, f := range daemon.Flags() {
		fmt.Fprintf(&b, "| `--%s` | %s | %s |\n", f.Name, f.Default, cell(f.Usage))
	}
	return b.String()
}

// openEnded are labels whose values are not a fixed set: the values a fresh
// registry holds would mislead.
var openEnded = []string{"apiserver", "group", "resource", "reason", "branch", "goarch", "goos", "goversion", "revision", "tags", "version"}

func metricsReference(fams []families.Family) string {
	var b strings.Builder
	b.WriteString("| metric | type | labels | stability | help |\n|---|---|---|---|---|\n")
	for _, f := range fams {
		var labels []string
		for _, l := range f.Labels {
			s := "`" + l + "`"
			if vs := f.Values[l]; len(vs) > 0 && !slices.Contains(openEnded, l) {
				s += " (" + strings.Join(vs, ", ") + ")"
			}
			labels = append(labels, s)
		}
		level := "EXPERIMENTAL"
		if slices.Contains(stable, f.Name) {
			level = "STABLE"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", f.Name, f.Type, strings.Join(labels, ", "), level, cell(f.Help))
	}
	return b.String()
}

// cell makes s safe in a Markdown table cell.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ", "<", "&lt;", ">", "&gt;").Replace(s)
}
