package monitoring

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

// TestDashboardFollowsGrafanaSchema reads the generated dashboard back into
// the SDK's types (Grafana's schema) and validates it: writing it again
// gives the same JSON, so no field is one the schema does not know. It then
// checks what the schema does not: the panels tile the grid without
// overlapping, every query is one of DashboardQueries, and each repeated
// row names a variable.
func TestDashboardFollowsGrafanaSchema(t *testing.T) {
	raw, err := os.ReadFile("../dashboards/watchcache.json")
	if err != nil {
		t.Fatal(err)
	}
	// The SDK's decoders find panel options and queries by plugin type in
	// its process-wide registry.
	plugins.RegisterDefaultPlugins()
	var d dashboard.Dashboard
	// Not UnmarshalJSONStrict: in v0.0.22 it returns an empty error list
	// as a non-nil error and drops every panel.
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("decode: %v", err)
	}
	again, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var before, after any
	if err := json.Unmarshal(raw, &before); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(again, &after); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("the dashboard changes when read into the SDK's types and written again (-generated +again):\n%s", diff)
	}
	if err := d.Validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	type cell struct{ x, y uint32 }
	taken := map[cell]string{}
	var exprs []string
	for _, p := range d.Panels {
		var title string
		var pos *dashboard.GridPos
		switch {
		case p.RowPanel != nil:
			title, pos = *p.RowPanel.Title, p.RowPanel.GridPos
			if r := p.RowPanel.Repeat; r != nil && !vars[*r] {
				t.Errorf("row %q repeats over %q, which is no variable", title, *r)
			}
		case p.Panel != nil:
			title, pos = *p.Panel.Title, p.Panel.GridPos
			for _, q := range p.Panel.Targets {
				pq, ok := q.(*prometheus.Dataquery)
				if !ok {
					t.Errorf("panel %q: a %T query", title, q)
					continue
				}
				exprs = append(exprs, pq.Expr)
			}
		}
		if pos == nil || pos.X+pos.W > 24 || pos.W == 0 || pos.H == 0 {
			t.Errorf("%q: grid position %+v", title, pos)
			continue
		}
		for x := pos.X; x < pos.X+pos.W; x++ {
			for y := pos.Y; y < pos.Y+pos.H; y++ {
				if other, ok := taken[cell{x, y}]; ok {
					t.Errorf("%q overlaps %q at %d,%d", title, other, x, y)
				}
				taken[cell{x, y}] = title
			}
		}
	}
	if want := DashboardQueries(); !slices.Equal(exprs, want) {
		t.Errorf("the dashboard's %d queries are not DashboardQueries' %d", len(exprs), len(want))
	}
}
