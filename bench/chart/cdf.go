package chart

import (
	"errors"
	"fmt"
	"math"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Series is one line of a distribution chart: sorted samples.
type Series struct {
	Name    string
	Samples []time.Duration // sorted ascending
}

// nines is where the share axis ends: 99.9%.
const nines = 3

// ninesScale places a share q at -log10(1-q), so that 90%, 99% and 99.9%
// are equally far apart: the tail gets as much room as the median.
type ninesScale struct{}

func (ninesScale) Normalize(lo, hi, q float64) float64 {
	f := func(q float64) float64 { return -math.Log10(math.Max(1-q, 1e-9)) }
	return (f(q) - f(lo)) / (f(hi) - f(lo))
}

// CDF draws each series' cumulative distribution (share of samples at or
// below a latency) with latency on a log axis and the share on a "nines"
// axis (0, 50, 90, 99, 99.9%), so the tail is as readable as the median.
// Colours repeat after the palette's eighth series; the repeats are dashed.
func CDF(path, title string, series []Series) error {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range series {
		if len(s.Samples) == 0 {
			continue
		}
		lo = math.Min(lo, ms(s.Samples[0]))
		hi = math.Max(hi, ms(s.Samples[len(s.Samples)-1]))
	}
	if math.IsInf(lo, 1) {
		return errors.New("chart: no samples")
	}
	lo = math.Pow(10, math.Floor(math.Log10(math.Max(lo, 0.1))))
	hi = math.Pow(10, math.Ceil(math.Log10(math.Max(hi, lo*10))))

	pg := newPage(1000, 560, title)
	p := newPlot()
	p.X.Scale, p.X.Min, p.X.Max, p.X.Padding = plot.LogScale{}, lo, hi, 0
	var xt plot.ConstantTicks
	for d := lo; d <= hi*1.001; d *= 10 {
		for _, m := range []float64{1, 2, 5} {
			if v := d * m; v <= hi*1.001 {
				xt = append(xt, plot.Tick{Value: v, Label: msLabel(v)})
			}
		}
	}
	p.X.Tick.Marker = xt
	top := 1 - math.Pow(10, -nines)
	p.Y.Scale, p.Y.Min, p.Y.Max, p.Y.Padding = ninesScale{}, 0, top, 0
	var yt plot.ConstantTicks
	for _, q := range []float64{0, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999} {
		yt = append(yt, plot.Tick{Value: q, Label: fmt.Sprintf("%g%%", q*100)})
	}
	p.Y.Tick.Marker = yt
	p.Add(grid(true))

	legend := plot.NewLegend()
	legend.TextStyle = textStyle(14, black)
	legend.Top, legend.Left = true, true
	legend.ThumbnailWidth = 24
	legend.Padding = 6
	for i, s := range series {
		l := &plotter.Line{StepStyle: plotter.PostStep}
		l.LineStyle = draw.LineStyle{Color: Palette[i%len(Palette)], Width: 2}
		if i >= len(Palette) {
			l.LineStyle.Dashes = []vg.Length{7, 4}
		}
		legend.Add(s.Name, l)
		if n := len(s.Samples); n > 0 {
			// A few hundred points are plenty: walk the quantiles evenly on
			// the nines axis.
			const steps = 600
			l.XYs = append(make(plotter.XYs, 0, steps+1), plotter.XY{X: math.Max(ms(s.Samples[0]), lo), Y: 0})
			for k := 1; k <= steps; k++ {
				q := 1 - math.Pow(10, -nines*float64(k)/float64(steps))
				v := s.Samples[min(n-1, int(q*float64(n-1)+0.5))]
				l.XYs = append(l.XYs, plotter.XY{X: math.Max(ms(v), lo), Y: q})
			}
			p.Add(l)
		}
	}
	// The legend sits right of the plot, as wide as its longest name.
	legendW := legend.Rectangle(pg.body).Size().X
	area := draw.Crop(pg.body, 0, -legendW-24, 26, 0)
	p.Draw(area)
	legend.Draw(draw.Crop(pg.body, pg.body.Size().X-legendW, 0, 0, -10))
	// The axis caption is drawn here, not as p.X.Label: plot lays a label
	// out at the arithmetic middle of the axis range, which on a log axis is
	// near its right end, and squeezes the plot to make room for it there.
	data := p.DataCanvas(area)
	caption := textStyle(14, dark)
	caption.XAlign = draw.XCenter
	pg.body.FillText(caption, vg.Point{X: (data.Min.X + data.Max.X) / 2, Y: pg.body.Min.Y},
		"end-to-end latency (ms, log scale); share of events at or below it (up to 99.9%)")
	return pg.save(path)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func msLabel(v float64) string {
	if v >= 1000 {
		return trim(fmt.Sprintf("%.1f", v/1000)) + "s"
	}
	return trim(fmt.Sprintf("%.1f", v))
}
