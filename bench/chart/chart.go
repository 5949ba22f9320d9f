// Package chart draws the benchmark's two PNG charts with nothing but the
// standard image packages and the Go fonts: horizontal bars (throughput) and
// cumulative distributions on a logarithmic axis (latency).
package chart

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"

	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/gobold"
	"golang.org/x/image/font/gofont/goregular"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/math/fixed"
)

// Palette is the series colours, in order.
var Palette = []color.RGBA{
	{0x4e, 0x79, 0xa7, 0xff}, {0xe1, 0x57, 0x59, 0xff}, {0xf2, 0x8e, 0x2b, 0xff},
	{0x59, 0xa1, 0x4f, 0xff}, {0xb0, 0x7a, 0xa1, 0xff}, {0x76, 0xb7, 0xb2, 0xff},
	{0xed, 0xc9, 0x48, 0xff}, {0x9c, 0x75, 0x5f, 0xff},
}

var (
	white = color.RGBA{0xff, 0xff, 0xff, 0xff}
	black = color.RGBA{0x22, 0x22, 0x22, 0xff}
	grey  = color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	dark  = color.RGBA{0x66, 0x66, 0x66, 0xff}
)

// canvas is an RGBA image with text faces.
type canvas struct {
	img         *image.RGBA
	text, title font.Face
}

func newCanvas(w, h int) (*canvas, error) {
	reg, err := face(goregular.TTF, 14)
	if err != nil {
		return nil, err
	}
	bold, err := face(gobold.TTF, 17)
	if err != nil {
		return nil, err
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.NewUniform(white), image.Point{}, draw.Src)
	return &canvas{img: img, text: reg, title: bold}, nil
}

func face(ttf []byte, size float64) (font.Face, error) {
	f, err := opentype.Parse(ttf)
	if err != nil {
		return nil, fmt.Errorf("chart: font: %w", err)
	}
	return opentype.NewFace(f, &opentype.FaceOptions{Size: size, DPI: 72, Hinting: font.HintingFull})
}

// label draws s with its baseline at y; align -1 left of x... 0 centred, 1
// right-aligned to x.
func (c *canvas) label(f font.Face, s string, x, y int, align int, col color.Color) {
	d := &font.Drawer{Dst: c.img, Src: image.NewUniform(col), Face: f}
	w := d.MeasureString(s).Round()
	switch align {
	case 0:
		x -= w / 2
	case 1:
		x -= w
	}
	d.Dot = fixed.P(x, y)
	d.DrawString(s)
}

func (c *canvas) width(f font.Face, s string) int {
	return (&font.Drawer{Face: f}).MeasureString(s).Round()
}

func (c *canvas) rect(r image.Rectangle, col color.Color) {
	draw.Draw(c.img, r, image.NewUniform(col), image.Point{}, draw.Src)
}

// line draws a line of the given thickness (Bresenham with square pens).
func (c *canvas) line(x0, y0, x1, y1, thick int, col color.Color) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	h := thick / 2
	for {
		c.rect(image.Rect(x0-h, y0-h, x0-h+thick, y0-h+thick), col)
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * e; e2 >= dy {
			e += dy
			x0 += sx
		} else {
			e += dx
			y0 += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}

func (c *canvas) save(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	if err := png.Encode(f, c.img); err != nil {
		f.Close()
		return fmt.Errorf("chart: %w", err)
	}
	return f.Close()
}

// Bar is one bar of a bar chart.
type Bar struct {
	Label string
	Value float64
	Text  string // drawn after the bar (default: the value)
}

// Bars draws horizontal bars from zero, one per row, to path.
func Bars(path, title, axis string, bars []Bar) error {
	if len(bars) == 0 {
		return errors.New("chart: no bars")
	}
	const rowH, top, bottom, right = 34, 56, 50, 150
	c, err := newCanvas(1000, top+bottom+rowH*len(bars))
	if err != nil {
		return err
	}
	left := 0
	maxV := 0.0
	for _, b := range bars {
		left = max(left, c.width(c.text, b.Label))
		maxV = math.Max(maxV, b.Value)
	}
	left += 24
	if maxV <= 0 {
		maxV = 1
	}
	plotW := c.img.Bounds().Dx() - left - right
	c.label(c.title, title, 16, 28, -1, black)
	step := niceStep(maxV / 5)
	scale := float64(plotW) / (math.Ceil(maxV/step) * step)
	baseY := top + rowH*len(bars)
	for v := 0.0; v <= maxV+step/2; v += step {
		x := left + int(v*scale)
		c.rect(image.Rect(x, top-6, x+1, baseY), grey)
		c.label(c.text, humanNumber(v), x, baseY+18, 0, dark)
	}
	c.label(c.text, axis, left+plotW/2, baseY+40, 0, dark)
	for i, b := range bars {
		y := top + i*rowH
		col := Palette[i%len(Palette)]
		c.label(c.text, b.Label, left-10, y+rowH/2+5, 1, black)
		w := int(b.Value * scale)
		c.rect(image.Rect(left, y+6, left+max(w, 1), y+rowH-6), col)
		text := b.Text
		if text == "" {
			text = humanNumber(b.Value)
		}
		c.label(c.text, text, left+w+8, y+rowH/2+5, -1, black)
	}
	c.rect(image.Rect(left, top-6, left+1, baseY), dark)
	return c.save(path)
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
