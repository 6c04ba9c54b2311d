package monitoring

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"

	"github.com/watchcache/watchcache-exporter/test/families"
	"github.com/watchcache/watchcache-exporter/test/promtest"
)

func TestGeneratedFilesUpToDate(t *testing.T) {
	files, err := Files()
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range files {
		got, err := os.ReadFile(filepath.Join("..", path))
		if err != nil {
			t.Errorf("%s: %v; run go run ./monitoring/gen", path, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from what monitoring/ generates; run go run ./monitoring/gen", path)
		}
	}
}

// registeredNames are the metric names the exporter registers, read from a
// registry holding the exporter's real metric sets.
func registeredNames(t *testing.T) map[string]bool {
	t.Helper()
	fams, err := families.All()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{"up": true} // Prometheus' own
	// The apiserver's own, for the panels that need Prometheus to scrape it.
	for _, n := range []string{"watch_cache_capacity", "apiserver_watch_cache_events_received_total", "apiserver_request_total"} {
		names[n] = true
	}
	for _, g := range Rules().Groups {
		for _, r := range g.Rules {
			names[r.Record] = r.Record != ""
		}
	}
	// Users' own thresholds of WatchCacheResourceWindowShort (docs/runbooks.md).
	names["watchcache:resource_window_threshold_seconds"] = true
	for _, f := range fams {
		names[f.Name] = true
	}
	return names
}

func allQueries() map[string]string {
	qs := map[string]string{}
	for i, q := range DashboardQueries() {
		qs["dashboard query "+string(rune('0'+i/10))+string(rune('0'+i%10))] = q
	}
	for _, g := range Rules().Groups {
		for _, r := range g.Rules {
			qs["rule "+r.Alert+r.Record] = r.Expr
		}
	}
	return qs
}

// Grafana's variables, as a test fills them in.
var variables = strings.NewReplacer("$__rate_interval", "1m", "$job", ".+", "$instance", ".+", "$apiserver_job", "apiserver", "$apiserver", ".+", "$resource", ".+")

func TestQueriesParseAndNameRegisteredMetrics(t *testing.T) {
	names := registeredNames(t)
	if !names["watchcache_window_seconds"] || !names["watchcache_load_writes_total"] {
		t.Fatalf("registry read wrong: %v", names)
	}
	for what, q := range allQueries() {
		expr, err := parser.NewParser(parser.Options{}).ParseExpr(variables.Replace(q))
		if err != nil {
			t.Errorf("%s %q: %v", what, q, err)
			continue
		}
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			vs, ok := n.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			name := vs.Name
			base := name
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				if trimmed, ok := strings.CutSuffix(name, suffix); ok && names[trimmed] {
					base = trimmed
				}
			}
			if !names[base] {
				t.Errorf("%s %q names %s, which the exporter does not register", what, q, name)
			}
			return nil
		})
	}
}

// TestPromtoolRules checks the rules and runs their unit tests with the
// promtool of each Prometheus version tested (2.42 and 3.x).
func TestPromtoolRules(t *testing.T) {
	for _, bin := range promtest.Promtools(t) {
		for _, args := range [][]string{
			{"check", "rules", "rules.yml"},
			{"test", "rules", "rules_test.yml"},
		} {
			out, err := exec.Command(bin.Path, args...).CombinedOutput()
			if err != nil {
				t.Errorf("promtool %s %v: %v\n%s", bin.Name, args, err, out)
			}
		}
	}
	// Every alert has a test case.
	tests, err := os.ReadFile("rules_test.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range Rules().Groups {
		for _, r := range g.Rules {
			if r.Alert != "" && !bytes.Contains(tests, []byte("alertname: "+r.Alert)) {
				t.Errorf("alert %s has no promtool test in rules_test.yml", r.Alert)
			}
		}
	}
	// And a runbook section in docs/runbooks.md, where runbook_url points.
	runbooks, err := os.ReadFile("../docs/runbooks.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range Rules().Groups {
		for _, r := range g.Rules {
			if r.Alert != "" && !slices.Contains(strings.Split(string(runbooks), "\n"), "## "+r.Alert) {
				t.Errorf("alert %s has no runbook section (## %s) in docs/runbooks.md", r.Alert, r.Alert)
			}
		}
	}
}
