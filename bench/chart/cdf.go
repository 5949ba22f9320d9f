package chart

import (
	"errors"
	"fmt"
	"image"
	"math"
	"time"
)

// Series is one line of a distribution chart: sorted samples.
type Series struct {
	Name    string
	Samples []time.Duration // sorted ascending
}

// CDF draws each series' cumulative distribution (share of samples at or
// below a latency) with latency on a log axis and the share on a "nines"
// axis (0, 50, 90, 99, 99.9%), so the tail is as readable as the median.
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
	const w, h, left, right, top, bottom = 1000, 560, 70, 250, 56, 60
	c, err := newCanvas(w, h)
	if err != nil {
		return err
	}
	plotW, plotH := w-left-right, h-top-bottom
	x := func(v float64) int {
		return left + int(float64(plotW)*(math.Log10(math.Max(v, lo))-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo)))
	}
	const nines = 3 // the axis ends at 99.9%
	y := func(q float64) int {
		t := math.Min(-math.Log10(math.Max(1-q, 1e-9))/nines, 1)
		return top + plotH - int(t*float64(plotH))
	}
	c.label(c.title, title, 16, 28, -1, black)
	for d := lo; d <= hi*1.001; d *= 10 {
		for _, m := range []float64{1, 2, 5} {
			v := d * m
			if v > hi*1.001 {
				break
			}
			c.rect(image.Rect(x(v), top, x(v)+1, top+plotH), grey)
			c.label(c.text, msLabel(v), x(v), top+plotH+18, 0, dark)
		}
	}
	for _, q := range []float64{0, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999} {
		c.rect(image.Rect(left, y(q), left+plotW, y(q)+1), grey)
		c.label(c.text, fmt.Sprintf("%g%%", q*100), left-8, y(q)+5, 1, dark)
	}
	c.label(c.text, "end-to-end latency (ms, log scale); share of events at or below it (up to 99.9%)", left+plotW/2, h-14, 0, dark)
	c.rect(image.Rect(left, top, left+1, top+plotH), dark)
	c.rect(image.Rect(left, top+plotH, left+plotW, top+plotH+1), dark)
	for i, s := range series {
		col := Palette[i%len(Palette)]
		n := len(s.Samples)
		ly := top + 10 + i*22
		c.rect(image.Rect(left+plotW+16, ly, left+plotW+40, ly+4), col)
		c.label(c.text, s.Name, left+plotW+46, ly+7, -1, black)
		if n == 0 {
			continue
		}
		// A few hundred points are plenty: walk the quantiles evenly on the
		// nines axis.
		px, py := x(ms(s.Samples[0])), y(0)
		steps := 600
		for k := 1; k <= steps; k++ {
			q := 1 - math.Pow(10, -nines*float64(k)/float64(steps))
			v := s.Samples[min(n-1, int(q*float64(n-1)+0.5))]
			nx, ny := x(ms(v)), y(q)
			c.line(px, py, nx, py, 2, col) // step: right, then up
			c.line(nx, py, nx, ny, 2, col)
			px, py = nx, ny
		}
	}
	return c.save(path)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func msLabel(v float64) string {
	if v >= 1000 {
		return trim(fmt.Sprintf("%.1f", v/1000)) + "s"
	}
	return trim(fmt.Sprintf("%.1f", v))
}
