// Package chart draws the benchmark's two PNG charts: horizontal bars
// (throughput) and cumulative distributions on a logarithmic axis (latency).
//
// They are drawn with gonum.org/v1/plot rather than pixel by pixel so that
// scales, ticks, legends and text layout are a maintained library's
// problem: a legend, for one, is as wide as its longest contender name
// instead of being cut at a fixed margin. The library is a requirement of
// the bench module only.
package chart

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Palette is the series colours, in order.
var Palette = []color.RGBA{
	{0x4e, 0x79, 0xa7, 0xff}, {0xe1, 0x57, 0x59, 0xff}, {0xf2, 0x8e, 0x2b, 0xff},
	{0x59, 0xa1, 0x4f, 0xff}, {0xb0, 0x7a, 0xa1, 0xff}, {0x76, 0xb7, 0xb2, 0xff},
	{0xed, 0xc9, 0x48, 0xff}, {0x9c, 0x75, 0x5f, 0xff},
}

var (
	black = color.RGBA{0x22, 0x22, 0x22, 0xff}
	grey  = color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	dark  = color.RGBA{0x66, 0x66, 0x66, 0xff}

	// sans is plot's bundled Liberation Sans; its default is the serif face.
	sans = font.Font{Typeface: "Liberation", Variant: "Sans"}
)

// The charts are drawn at 72 DPI, so a point is a pixel: the PNG is exactly
// as many pixels wide as the layout says, and text sizes read as pixels.
const dpi = 72

func textStyle(size float64, col color.Color) text.Style {
	return text.Style{Color: col, Font: font.From(sans, vg.Length(size)), Handler: plot.DefaultTextHandler}
}

// newPlot is a plot with the charts' fonts and colours and no title (the
// page draws it, left-aligned).
func newPlot() *plot.Plot {
	p := plot.New()
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle = textStyle(14, dark)
		a.Label.TextStyle.XAlign, a.Label.TextStyle.YAlign = draw.XCenter, draw.YBottom
		a.Tick.Label = textStyle(14, dark)
		a.Color = dark
		a.Tick.Color = dark
	}
	p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XCenter, draw.YTop
	p.Y.Tick.Label.XAlign, p.Y.Tick.Label.YAlign = draw.XRight, draw.YCenter
	return p
}

// grid draws light lines at the major ticks; vertical only when horizontal
// is false.
func grid(horizontal bool) *plotter.Grid {
	g := plotter.NewGrid()
	g.Vertical = draw.LineStyle{Color: grey, Width: 1}
	g.Horizontal = draw.LineStyle{}
	if horizontal {
		g.Horizontal = draw.LineStyle{Color: grey, Width: 1}
	}
	return g
}

// page is a white w x h pixel image with title drawn at its top left; body
// is the canvas below the title.
type page struct {
	img  *vgimg.Canvas
	body draw.Canvas
}

func newPage(w, h int, title string) page {
	img := vgimg.NewWith(vgimg.UseWH(vg.Length(w), vg.Length(h)), vgimg.UseDPI(dpi),
		vgimg.UseBackgroundColor(color.White))
	c := draw.New(img)
	ts := textStyle(17, black)
	ts.Font.Weight = xfont.WeightBold
	ts.YAlign = draw.YTop
	c.FillText(ts, vg.Point{X: 16, Y: c.Max.Y - 14}, title)
	return page{img: img, body: draw.Crop(c, 16, -16, 10, -46)}
}

func (pg page) save(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: pg.img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("chart: %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	return nil
}

// Bar is one bar of a bar chart.
type Bar struct {
	Label string
	Value float64
	Text  string // drawn after the bar (default: the value)
}

// Bars draws horizontal bars from zero, one per row in the given order from
// the top, to path.
func Bars(path, title, axis string, bars []Bar) error {
	if len(bars) == 0 {
		return errors.New("chart: no bars")
	}
	const rowH, top, bottom = 34, 56, 50
	n := len(bars)
	pg := newPage(1000, top+bottom+rowH*n, title)
	p := newPlot()
	p.X.Label.Text = axis
	p.Y.Tick.Label = textStyle(14, black)
	p.Y.Tick.Label.XAlign, p.Y.Tick.Label.YAlign = draw.XRight, draw.YCenter
	names := make([]string, n)
	maxV := 0.0
	for i, b := range bars {
		names[n-1-i] = b.Label // plot's y grows upwards; the first bar goes on top
		maxV = math.Max(maxV, b.Value)
	}
	p.NominalY(names...)
	p.Y.Min, p.Y.Max, p.Y.Padding = -0.5, float64(n)-0.5, 0
	if maxV <= 0 {
		maxV = 1
	}
	step := niceStep(maxV / 5)
	p.X.Min, p.X.Max = 0, math.Ceil(maxV/step)*step
	var ticks plot.ConstantTicks
	for v := 0.0; v <= p.X.Max+step/2; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: humanNumber(v)})
	}
	p.X.Tick.Marker = ticks
	p.Add(grid(false))

	texts := plotter.XYLabels{XYs: make(plotter.XYs, n), Labels: make([]string, n)}
	var charts []*plotter.BarChart
	for i, b := range bars {
		row := float64(n - 1 - i)
		bc, err := plotter.NewBarChart(plotter.Values{math.Max(b.Value, 0)}, 1)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		bc.Horizontal, bc.XMin = true, row
		bc.Color, bc.LineStyle.Width = Palette[i%len(Palette)], 0
		charts = append(charts, bc)
		p.Add(bc)
		texts.XYs[i] = plotter.XY{X: math.Max(b.Value, 0), Y: row}
		texts.Labels[i] = b.Text
		if b.Text == "" {
			texts.Labels[i] = humanNumber(b.Value)
		}
	}
	labels, err := plotter.NewLabels(texts)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	for i := range labels.TextStyle {
		labels.TextStyle[i] = textStyle(14, black)
		labels.TextStyle[i].YAlign = draw.YCenter
	}
	labels.Offset = vg.Point{X: 8}
	p.Add(labels)
	// A bar's thickness is a length, not a share of its row: measure the
	// rows once the axes and labels have taken their room.
	data := p.DataCanvas(pg.body)
	for _, bc := range charts {
		bc.Width = (data.Max.Y - data.Min.Y) / vg.Length(n) * 0.65
	}
	p.Draw(pg.body)
	return pg.save(path)
}

// niceStep rounds a raw step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

func humanNumber(v float64) string {
	switch {
	case v >= 1e6:
		return trim(fmt.Sprintf("%.2f", v/1e6)) + "M"
	case v >= 1e3:
		return trim(fmt.Sprintf("%.1f", v/1e3)) + "k"
	}
	return trim(fmt.Sprintf("%.1f", v))
}

func trim(s string) string {
	for len(s) > 1 && s[len(s)-1] == '0' {
		s = s[:len(s)-1]
	}
	if s[len(s)-1] == '.' {
		s = s[:len(s)-1]
	}
	return s
}
