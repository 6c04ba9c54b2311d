package docs_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/kyaml/yaml"
)

const chartDir = "charts/watchcache-exporter"

// value is one documented value of the chart.
type value struct{ key, def, doc string }

// chartValues are the values of values.yaml that a "# --" comment documents
// (the helm-docs convention), in file order, a documented map as a whole;
// undocumented are the values documented neither so nor by a map above.
func chartValues(t *testing.T) (documented []value, undocumented []string) {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(root(t), chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(text, &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			key := prefix + k.Value
			d, ok := helmDoc(k.HeadComment)
			if ok {
				documented = append(documented, value{key, defaultOf(t, v), d})
			}
			switch {
			case ok: // the whole value, a map too
			case v.Kind == yaml.MappingNode && len(v.Content) > 0:
				walk(v, key+".")
			default:
				undocumented = append(undocumented, key)
			}
		}
	}
	walk(doc.Content[0], "")
	return documented, undocumented
}

// helmDoc is the "# --" part of a key's comment, joined into one line.
func helmDoc(comment string) (string, bool) {
	_, after, ok := strings.Cut(comment, "# -- ")
	if !ok {
		return "", false
	}
	var words []string
	for _, line := range strings.Split(after, "\n") {
		words = append(words, strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "#")))
	}
	return strings.Join(words, " "), true
}

// defaultOf is a value as the table shows it: JSON, which is also YAML.
func defaultOf(t *testing.T, n *yaml.Node) string {
	var v any
	if err := n.Decode(&v); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The chart's README lists every value with its default and its "# --"
// comment from values.yaml; every value is documented.
func TestChartValuesDocumented(t *testing.T) {
	documented, undocumented := chartValues(t)
	for _, k := range undocumented {
		t.Errorf("values.yaml: %s has no \"# --\" comment, nor has a key above it", k)
	}
	var b strings.Builder
	b.WriteString("| value | default | what |\n|---|---|---|\n")
	for _, v := range documented {
		fmt.Fprintf(&b, "| `%s` | `%s` | %s |\n", v.key, v.def, cell(v.doc))
	}
	path := filepath.Join(root(t), chartDir, "README.md")
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	begin, end := "<!-- BEGIN GENERATED: values -->\n", "<!-- END GENERATED: values -->"
	i, j := strings.Index(string(text), begin), strings.Index(string(text), end)
	if i < 0 || j < i {
		t.Fatalf("%s/README.md: no %q ... %q markers", chartDir, begin, end)
	}
	want := string(text[:i+len(begin)]) + b.String() + string(text[j:])
	switch {
	case want == string(text):
	case os.Getenv(updateEnv) == "1":
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s/README.md: values rewritten", chartDir)
	default:
		t.Errorf("%s/README.md: the table of values differs from values.yaml's comments; run make docs", chartDir)
	}
}
