package chart

import (
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"
)

// TestChartsDraw draws both charts and checks they decode as PNGs of the
// expected size. (What they look like is checked by eye.)
func TestChartsDraw(t *testing.T) {
	dir := t.TempDir()
	if out := os.Getenv("CHART_OUT"); out != "" {
		dir = out
	}
	bars := []Bar{{Label: "raw-pipe", Value: 56027}, {Label: "exactly-once-100ms", Value: 7652}, {Label: "postgres", Value: 0}}
	if err := Bars(filepath.Join(dir, "bars.png"), "Throughput", "events per second", bars); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var series []Series
	for i, scale := range []float64{5, 100, 1500} {
		s := make([]time.Duration, 2000)
		for j := range s {
			s[j] = time.Duration(scale * (1 + rng.ExpFloat64()) * float64(time.Millisecond))
		}
		sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
		series = append(series, Series{Name: []string{"a", "b", "c"}[i], Samples: s})
	}
	series = append(series, Series{Name: "empty"})
	if err := CDF(filepath.Join(dir, "cdf.png"), "Latency", series); err != nil {
		t.Fatal(err)
	}
	for name, w := range map[string]int{"bars.png": 1000, "cdf.png": 1000} {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if img.Bounds().Dx() != w {
			t.Errorf("%s: width %d, want %d", name, img.Bounds().Dx(), w)
		}
	}
	if err := CDF(filepath.Join(dir, "none.png"), "x", []Series{{Name: "empty"}}); err == nil {
		t.Error("CDF of no samples: want an error")
	}
}
