package report

import (
	"fmt"
	"image/color"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/idem-dev/idem/bench/internal/results"
)

// Colours by kind of contender, so that a chart reads at a glance.
var (
	colBaseline = color.RGBA{R: 150, G: 150, B: 150, A: 255}
	colIdem     = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	colPeer     = color.RGBA{R: 255, G: 127, B: 14, A: 255}
)

func colourOf(c results.Contender) color.Color {
	switch {
	case c.Kind == "baseline":
		return colBaseline
	case isIdem(c):
		return colIdem
	}
	return colPeer
}

func isIdem(c results.Contender) bool {
	return len(c.ID) > 3 && (c.ID[:3] == "gw-" || c.ID[:3] == "mw-")
}

// barChart draws one horizontal bar per row, top to bottom in row order.
func barChart(path, title, xlabel string, rs []row, value func(row) float64) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.X.Min = 0
	names := make([]string, len(rs))
	top := 0.0
	// gonum draws the first value at the bottom: reverse, so that the
	// chart lists contenders in the tables' order.
	for i, r := range rs {
		top = max(top, value(r))
		j := len(rs) - 1 - i
		names[j] = r.C.Name
		vs := make(plotter.Values, len(rs))
		vs[j] = value(r)
		b, err := plotter.NewBarChart(vs, vg.Points(14))
		if err != nil {
			return err
		}
		b.Horizontal = true
		b.Color = colourOf(r.C)
		b.LineStyle.Width = 0
		p.Add(b)
	}
	p.X.Max = top * 1.08
	p.NominalY(names...)
	p.Add(plotter.NewGrid())
	return p.Save(7*vg.Inch, vg.Length(1.2+0.3*float64(len(rs)))*vg.Inch, path)
}

// latencyChart draws p50, p99 and p99.9 per row on a log scale.
func latencyChart(path, title string, rs []row) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "latency (ms, log scale)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	names := make([]string, len(rs))
	for i, r := range rs {
		names[len(rs)-1-i] = r.C.Name
	}
	series := []struct {
		name  string
		shape draw.GlyphDrawer
		v     func(row) float64
	}{
		{"p50", draw.CircleGlyph{}, func(r row) float64 { return r.P50 }},
		{"p99", draw.TriangleGlyph{}, func(r row) float64 { return r.P99 }},
		{"p99.9", draw.CrossGlyph{}, func(r row) float64 { return r.P999 }},
	}
	top, bottom := 0.0, 0.0
	for si, s := range series {
		var pts plotter.XYs
		for i, r := range rs {
			if v := s.v(r); v > 0 {
				top = max(top, v)
				if bottom == 0 || v < bottom {
					bottom = v
				}
				pts = append(pts, plotter.XY{X: v, Y: float64(len(rs) - 1 - i)})
			}
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		sc.GlyphStyle.Shape = s.shape
		sc.GlyphStyle.Radius = vg.Points(3.5)
		sc.GlyphStyle.Color = plotutil.Color(si)
		p.Add(sc)
		p.Legend.Add(s.name, sc)
	}
	// Room on the right for the legend, clear of the points.
	p.X.Min, p.X.Max = bottom/1.5, top*6
	p.Legend.Top = true
	p.NominalY(names...)
	p.Add(plotter.NewGrid())
	return p.Save(7*vg.Inch, vg.Length(1.4+0.3*float64(len(rs)))*vg.Inch, path)
}

// scaleChart draws the latency of op against live keys: a colour per
// store, p50 solid and p99 dashed.
func scaleChart(path, op string, lat []results.Latency) error {
	p := plot.New()
	p.Title.Text = "Store latency, " + op + " (one client), as live keys grow"
	p.X.Label.Text = "live keys (log scale)"
	p.Y.Label.Text = "latency (ms, log scale)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	var stores []string
	lines := map[string][2]plotter.XYs{}
	top := 0.0
	for _, l := range lat {
		if l.Op != op {
			continue
		}
		if _, ok := lines[l.Store]; !ok {
			stores = append(stores, l.Store)
		}
		ls := lines[l.Store]
		ls[0] = append(ls[0], plotter.XY{X: float64(l.LiveKeys), Y: max(l.P50, 1e-3)})
		ls[1] = append(ls[1], plotter.XY{X: float64(l.LiveKeys), Y: max(l.P99, 1e-3)})
		lines[l.Store] = ls
		top = max(top, l.P99)
	}
	for i, st := range stores {
		for q, name := range []string{"p50", "p99"} {
			l, s, err := plotter.NewLinePoints(lines[st][q])
			if err != nil {
				return err
			}
			c := plotutil.Color(i)
			l.Color, s.Color = c, c
			if q == 1 {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			p.Add(l, s)
			p.Legend.Add(st+" "+name, l, s)
		}
	}
	// Room above the lines for the legend.
	p.Y.Max = top * 20
	logRange(p)
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}

// cleanupChart draws cleanup time against expired records, a line per
// store and number of live keys.
func cleanupChart(path string, cl []results.Cleanup) error {
	p := plot.New()
	p.Title.Text = "Cleanup time as expired records grow"
	p.X.Label.Text = "expired records deleted (log scale)"
	p.Y.Label.Text = "seconds (log scale)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	type key struct {
		store string
		live  int
	}
	lines := map[key]plotter.XYs{}
	var order []key
	for _, c := range cl {
		if c.Note != "" {
			continue // nothing to delete: Redis expires records itself
		}
		k := key{c.Store, c.LiveKeys}
		if _, ok := lines[k]; !ok {
			order = append(order, k)
		}
		lines[k] = append(lines[k], plotter.XY{X: float64(c.Expired), Y: max(c.Seconds, 1e-4)})
	}
	slices.SortFunc(order, func(a, b key) int {
		if a.store != b.store {
			if a.store < b.store {
				return -1
			}
			return 1
		}
		return a.live - b.live
	})
	for i, k := range order {
		l, s, err := plotter.NewLinePoints(lines[k])
		if err != nil {
			return err
		}
		c := plotutil.Color(i)
		l.Color, s.Color = c, c
		p.Add(l, s)
		p.Legend.Add(fmt.Sprintf("%s, %s live keys", k.store, count(k.live)), l, s)
	}
	logRange(p)
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	return p.Save(7*vg.Inch, 5*vg.Inch, path)
}

// logRange widens an axis of log scale whose data is one value: the plot
// would pad it by one on each side, below zero for a value under one.
func logRange(p *plot.Plot) {
	for _, ax := range []*plot.Axis{&p.X, &p.Y} {
		if ax.Min > 0 && ax.Max > ax.Min {
			continue
		}
		if ax.Max > 0 {
			ax.Min, ax.Max = ax.Max/10, ax.Max*10
		}
	}
}

// charts writes every chart into dir and returns their file names by
// purpose.
func charts(doc *results.Doc, dir string, scenarios []string) (map[string]string, error) {
	out := map[string]string{}
	for _, sc := range scenarios {
		rs := rows(doc, sc)
		if len(rs) == 0 {
			continue
		}
		name := "throughput-" + sc + ".png"
		if err := barChart(filepath.Join(dir, name), "Throughput, "+scenarioTitle[sc]+" (2xx responses/s, median)", "requests per second", rs,
			func(r row) float64 { return r.Throughput }); err != nil {
			return nil, err
		}
		out["throughput-"+sc] = name
		name = "latency-" + sc + ".png"
		if err := latencyChart(filepath.Join(dir, name), "Latency under full load, "+scenarioTitle[sc]+" (median of rounds)", rs); err != nil {
			return nil, err
		}
		out["latency-"+sc] = name
		name = "rss-" + sc + ".png"
		if err := barChart(filepath.Join(dir, name), "Peak RSS, "+scenarioTitle[sc]+" (MiB, median)", "MiB", rs,
			func(r row) float64 { return r.RSSMiB }); err != nil {
			return nil, err
		}
		out["rss-"+sc] = name
	}
	for key, op := range map[string]string{"scale-new": "reserve new key", "scale-existing": "reserve existing key"} {
		if len(doc.Scale) == 0 {
			break
		}
		name := key + ".png"
		if err := scaleChart(filepath.Join(dir, name), op, doc.Scale); err != nil {
			return nil, err
		}
		out[key] = name
	}
	if len(doc.Cleanup) > 0 {
		if err := cleanupChart(filepath.Join(dir, "cleanup.png"), doc.Cleanup); err != nil {
			return nil, err
		}
		out["cleanup"] = "cleanup.png"
	}
	return out, nil
}
