package contenders

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStandbyStatus(t *testing.T) {
	path := filepath.Join(t.TempDir(), "not-yet", "i0.standbys") // its dir is made
	s, err := newStandbyStatus(path)
	if err != nil {
		t.Fatal(err)
	}
	read := func() string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	steps := []struct {
		p    int32
		lag  int64
		want string
	}{
		{-1, 0, "starting"},
		{3, 800_000, "behind 1"},
		{5, 20, "behind 1"},
		{3, standbyCaughtUp, "behind 0"},
		{7, standbyCaughtUp + 1, "behind 1"},
		{7, -1, "behind 0"},
	}
	for i, st := range steps {
		if st.p >= 0 {
			s.report(st.p, st.lag)
		}
		if got := read(); got != st.want {
			t.Fatalf("step %d (partition %d lag %d): file says %q, want %q", i, st.p, st.lag, got, st.want)
		}
	}
}
