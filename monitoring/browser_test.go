package monitoring

import (
	"encoding/json"
	"fmt"
	"image/color"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/watchcache/watchcache-exporter/test/promtest"
	"github.com/watchcache/watchcache-exporter/test/testcluster"
)

// UpdateDocsEnv, when "1", makes TestDocsPictures write the status page's
// screenshot and a plot of the main panels into docs/.
const UpdateDocsEnv = "WATCHCACHE_UPDATE_DOCS"

func chromium(t *testing.T) string {
	t.Helper()
	testcluster.Real(t)
	p, err := exec.LookPath("chromium")
	if err != nil {
		testcluster.Missing(t, "chromium not found; install Debian's chromium with `make chromium` (make test does)")
	}
	return p
}

// Flags that keep Chromium off this machine's closed network and quiet.
func chromiumArgs(t *testing.T, extra ...string) []string {
	return append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=8000"}, extra...)
}

var dataPoints = regexp.MustCompile(`<path id="(window-[^"]+|predicted|rate)"[^>]*data-points="(\d+)"`)

// checkStatusPage loads the exporter's status page in headless Chromium and
// checks that its chart drew the window with data; with a path, it saves a
// screenshot there too.
func checkStatusPage(t *testing.T, addr, screenshot string) {
	t.Helper()
	bin := chromium(t)
	page := "http://" + addr + "/"
	out, err := exec.Command(bin, chromiumArgs(t, "--dump-dom", page)...).Output()
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
	if screenshot != "" {
		if out, err := exec.Command(bin, chromiumArgs(t, "--window-size=960,720", "--screenshot="+mustAbs(t, screenshot), page)...).CombinedOutput(); err != nil {
			t.Errorf("screenshot: %v\n%s", err, out)
		}
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// plotPanels draws the main panels from Prometheus' data of the run into
// docs/panels.png: the window (measured and predicted) and the write rate.
func plotPanels(t *testing.T, prom promtest.Server, from, to time.Time) {
	t.Helper()
	series := func(q string) map[string]plotter.XYs {
		var data struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		}
		raw := prom.Get(t, "/api/v1/query_range", url.Values{"query": {q}, "start": {strconv.FormatInt(from.Unix(), 10)},
			"end": {strconv.FormatInt(to.Unix(), 10)}, "step": {"2"}})
		if err := json.Unmarshal(raw, &data); err != nil {
			t.Fatal(err)
		}
		out := map[string]plotter.XYs{}
		for _, r := range data.Result {
			var xys plotter.XYs
			for _, v := range r.Values {
				ts, _ := v[0].(float64)
				y, err := strconv.ParseFloat(v[1].(string), 64)
				if err != nil || y != y {
					continue
				}
				xys = append(xys, plotter.XY{X: ts - float64(from.Unix()), Y: y})
			}
			out[fmt.Sprint(r.Metric)] = xys
		}
		return out
	}
	top := plot.New()
	top.Title.Text = "History window (s)"
	top.X.Label.Text = "seconds into the run"
	bottom := plot.New()
	bottom.Title.Text = "Write rate (writes/s)"
	bottom.X.Label.Text = "seconds into the run"
	add := func(p *plot.Plot, q, name string, c color.Color, dashed bool) {
		for _, xys := range series(q) {
			l, err := plotter.NewLine(xys)
			if err != nil {
				continue
			}
			l.Color = c
			l.Width = vg.Points(1.5)
			if dashed {
				l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
			}
			p.Add(l)
			p.Legend.Add(name, l)
		}
	}
	add(top, `watchcache_window_seconds{resource="configmaps"}`, "measured window", color.RGBA{31, 119, 180, 255}, false)
	add(top, `watchcache_predicted_window_seconds`, "predicted window", color.RGBA{255, 127, 14, 255}, true)
	add(top, `watchcache_expiry_last_seconds`, "time to first 410 (last)", color.RGBA{44, 160, 44, 255}, false)
	add(bottom, `watchcache_measured_writes_per_second{source="exporter"}`, "exporter writes/s", color.RGBA{127, 127, 127, 255}, false)
	add(bottom, `watchcache_load_target_writes_per_second`, "target", color.RGBA{188, 189, 34, 255}, true)
	top.Legend.Top, bottom.Legend.Top = true, true
	img := vgimg.New(vg.Points(800), vg.Points(560))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadY: vg.Points(10), PadX: vg.Points(10), PadTop: vg.Points(5), PadBottom: vg.Points(5)}
	canvases := plot.Align([][]*plot.Plot{{top}, {bottom}}, tiles, dc)
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	f, err := os.Create(filepath.Join("..", "docs", "panels.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		t.Fatal(err)
	}
}
