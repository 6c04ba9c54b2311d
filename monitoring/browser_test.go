package monitoring

import (
	"encoding/json"
	"fmt"
	"image/color"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/watchcache/watchcache-exporter/test/browser"
	"github.com/watchcache/watchcache-exporter/test/promtest"
)

// UpdateDocsEnv, when "1", makes TestDocsPictures write the status page's
// screenshot and a plot of the main panels into docs/.
const UpdateDocsEnv = browser.UpdateDocsEnv

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
	add(bottom, `rate(watchcache_exporter_writes_total[30s])`, "exporter writes/s", color.RGBA{127, 127, 127, 255}, false)
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
