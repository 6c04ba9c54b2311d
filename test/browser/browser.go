// Package browser loads the exporter's status page in headless Chromium
// (Debian's chromium, installed by make chromium), as a person would see it.
package browser

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

// UpdateDocsEnv, when "1", makes the tests that draw the docs' pictures
// write them into docs/.
const UpdateDocsEnv = "WATCHCACHE_UPDATE_DOCS"

// Chromium is the browser's path; without it the test is skipped, or failed
// under WATCHCACHE_REQUIRE_KUBE=1.
func Chromium(t testing.TB) string {
	t.Helper()
	testcluster.Real(t)
	p, err := exec.LookPath("chromium")
	if err != nil {
		testcluster.Missing(t, "chromium not found; install Debian's chromium with `make chromium` (make test does)")
	}
	return p
}

// Args are flags that keep Chromium off this machine's closed network and
// quiet, then extra.
func Args(t testing.TB, extra ...string) []string {
	return append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=8000"}, extra...)
}

var (
	dataPoints  = regexp.MustCompile(`<path id="(window-[^"]+|predicted|rate)"[^>]*data-points="(\d+)"`)
	resourceRow = regexp.MustCompile(`<tr><td class="name">([^<]+)</td>`)
	about       = regexp.MustCompile(`<p id="about">(.*?)</p>`)
	tags        = regexp.MustCompile(`<[^>]+>`)
)

// Page is what the status page showed.
type Page struct {
	// About is the line that says what the exporter is (mode, role,
	// version), as text.
	About string
	// Resources are the rows of the resources' table, in order.
	Resources []string
}

// CheckStatusPage loads the exporter's status page in headless Chromium,
// checks that its chart drew the window and the rate with data and its
// legend, and returns what else it showed; with a path, it saves a
// screenshot there too.
func CheckStatusPage(t testing.TB, addr, screenshot string) Page {
	t.Helper()
	bin := Chromium(t)
	page := "http://" + addr + "/"
	out, err := exec.Command(bin, Args(t, "--dump-dom", page)...).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom %s: %v", page, err)
	}
	points := map[string]int{}
	for _, m := range dataPoints.FindAllStringSubmatch(string(out), -1) {
		n, _ := strconv.Atoi(m[2])
		points[m[1]] = n
	}
	window := 0
	for id, n := range points {
		if id != "predicted" && id != "rate" {
			window += n
		}
	}
	if window == 0 || points["rate"] == 0 {
		t.Errorf("status page in Chromium: chart lines and their points %v; want window and rate lines with data", points)
	}
	// The legend is built from text nodes, under the page's CSP.
	if !strings.Contains(string(out), `id="legend"><span style="color:`) {
		t.Errorf("status page in Chromium: no legend drawn")
	}
	var p Page
	if m := about.FindStringSubmatch(string(out)); m != nil {
		p.About = tags.ReplaceAllString(m[1], " ")
	}
	for _, m := range resourceRow.FindAllStringSubmatch(string(out), -1) {
		p.Resources = append(p.Resources, m[1])
	}
	if screenshot != "" {
		abs, err := filepath.Abs(screenshot)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(bin, Args(t, "--window-size=960,900", "--screenshot="+abs, page)...).CombinedOutput(); err != nil {
			t.Errorf("screenshot: %v\n%s", err, out)
		}
	}
	return p
}
