package processor

import (
	"math"
	"runtime/debug"
	"testing"
)

func TestRestoreSlots(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	for _, tt := range []struct {
		limit int64
		want  int
	}{
		{math.MaxInt64, restoreParallel}, // no limit
		{180 << 20, 1},                   // 0.9 of a 200 MB container
		{100 << 20, 1},
		{400 << 20, 2},
		{1 << 30, restoreParallel},
	} {
		debug.SetMemoryLimit(tt.limit)
		if got := restoreSlots(); got != tt.want {
			t.Errorf("memory limit %d: %d restores at once, want %d", tt.limit, got, tt.want)
		}
	}
}
