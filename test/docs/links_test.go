// Package docs_test checks the project's documents: every link between
// them resolves, to a file and to a heading of it.
package docs_test

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// repoURL is where the documents are published: links to it (the alerts'
// runbook_url) must resolve in this checkout too.
const repoURL = "https://github.com/watchcache/watchcache-exporter/blob/main/"

var (
	mdLink   = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	repoLink = regexp.MustCompile(regexp.QuoteMeta(repoURL) + `[^\s"')>]+`)
	heading  = regexp.MustCompile(`^#{1,6} (.+)$`)
)

func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// documents are the Markdown files an operator reads.
func documents(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"*.md", "docs/*.md", "charts/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 5 {
		t.Fatalf("found only %d documents under %s", len(files), root)
	}
	return files
}

// anchors are the fragment names GitHub gives a document's headings.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		m := heading.FindStringSubmatch(line)
		if fenced || m == nil {
			continue
		}
		base := slug(m[1])
		a := base
		for i := 1; out[a]; i++ {
			a = base + "-" + strconv.Itoa(i)
		}
		out[a] = true
	}
	return out
}

func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// check says what is wrong with target (path#anchor), or "".
func check(root, from, target string) string {
	path, anchor, _ := strings.Cut(target, "#")
	file := from
	if path != "" {
		file = filepath.Join(filepath.Dir(from), path)
		if rel, err := filepath.Rel(root, file); err != nil || strings.HasPrefix(rel, "..") {
			return "outside the repository"
		}
		if _, err := os.Stat(file); err != nil {
			return "no such file"
		}
	}
	if anchor == "" || !strings.HasSuffix(file, ".md") {
		return ""
	}
	text, err := os.ReadFile(file)
	if err != nil {
		return err.Error()
	}
	if !anchors(string(text))[anchor] {
		return "no heading #" + anchor
	}
	return ""
}

// Every relative link of every document resolves to a file of the
// repository and, with a fragment, to a heading of it.
func TestLinksResolve(t *testing.T) {
	root := root(t)
	n := 0
	for _, doc := range documents(t, root) {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(text), -1) {
			target := m[1]
			switch {
			case strings.HasPrefix(target, repoURL):
				target = filepath.Join(root, strings.TrimPrefix(target, repoURL))
				target, _ = filepath.Rel(filepath.Dir(doc), target)
			case strings.Contains(target, "://"), strings.HasPrefix(target, "mailto:"):
				continue // not checked: nothing leaves the machine
			}
			n++
			if why := check(root, doc, target); why != "" {
				rel, _ := filepath.Rel(root, doc)
				t.Errorf("%s: link %s: %s", rel, m[1], why)
			}
		}
	}
	t.Logf("%d links checked", n)
}

// Links to the published repository from rules, manifests and code (each
// alert's runbook_url) resolve in this checkout.
func TestRepositoryLinksResolve(t *testing.T) {
	root := root(t)
	n := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", ".demo", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".yml", ".yaml", ".json", ".go", ".md", ".tpl":
		default:
			return nil
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, link := range repoLink.FindAllString(string(text), -1) {
			n++
			target := strings.TrimPrefix(link, repoURL)
			if why := check(root, filepath.Join(root, "x"), target); why != "" {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s: link %s: %s", rel, link, why)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no link to the repository found: every alert's runbook_url should be one")
	}
	t.Logf("%d repository links checked", n)
}

// No document cites anything outside the repository: not the project's old
// design notes, nor a web page (links to loopback and example hosts, as in
// commands, are not citations).
func TestNoOutsideCitation(t *testing.T) {
	root := root(t)
	for _, doc := range documents(t, root) {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, doc)
		for _, outside := range []string{"DESIGN.md", "../shared"} {
			if strings.Contains(string(text), outside) {
				t.Errorf("%s cites %s, which is not in the repository: the design is docs/how-it-works.md", rel, outside)
			}
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(text), -1) {
			u, err := url.Parse(m[1])
			if err != nil {
				t.Errorf("%s: link %s: %v", rel, m[1], err)
				continue
			}
			if u.Scheme != "http" && u.Scheme != "https" {
				continue // a file of the repository, checked by TestLinksResolve
			}
			if h := u.Hostname(); h != "127.0.0.1" && h != "localhost" && h != "example.com" && !strings.HasSuffix(h, ".example.com") {
				t.Errorf("%s links to %s, outside the repository: say it in the repository, or name it without a link", rel, m[1])
			}
		}
	}
}

// The README stays short: what an operator reads first.
func TestREADMEShort(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(root(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(text), "\n"); n > 200 {
		t.Errorf("README.md has %d lines, want at most 200: move the detail into docs/", n)
	}
}
