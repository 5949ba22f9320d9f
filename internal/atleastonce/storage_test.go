package atleastonce

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// buildStore opens partition 0 of topic "t" under dir through countingBuilder
// and returns it with the last size it reported.
func buildStore(t *testing.T, dir string, log *slog.Logger) (*countingStorage, *int64) {
	t.Helper()
	var size int64 = -1
	st, err := countingBuilder(dir, log, func(_ string, _ int32, n int64) { size = n }, func(string, int32) {})("t", 0)
	if err != nil {
		t.Fatalf("countingBuilder: %v", err)
	}
	if err := st.Open(); err != nil {
		t.Fatal(err)
	}
	return st.(*countingStorage), &size
}

// garbleManifests flips 16 bytes in each LevelDB manifest of a closed store.
func garbleManifests(t *testing.T, store string) {
	t.Helper()
	manifests, _ := filepath.Glob(filepath.Join(store, "MANIFEST-*"))
	if len(manifests) == 0 {
		t.Fatal("no manifest to damage")
	}
	for _, m := range manifests {
		b, _ := os.ReadFile(m)
		for i := len(b) / 3; i < len(b)/3+16 && i < len(b); i++ {
			b[i] ^= 0x5a
		}
		if err := os.WriteFile(m, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCountingBuilderCountsAndReplacesADamagedStore(t *testing.T) {
	for _, damaged := range []bool{false, true} {
		t.Run(fmt.Sprintf("damaged=%v", damaged), func(t *testing.T) {
			dir := t.TempDir()
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			st, _ := buildStore(t, dir, log)
			for i := 0; i < 50; i++ {
				if err := st.Set(fmt.Sprintf("id-%d", i), []byte("v")); err != nil {
					t.Fatal(err)
				}
			}
			if err := st.SetOffset(49); err != nil { // goka's __offset key is not an entry
				t.Fatal(err)
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			if damaged {
				garbleManifests(t, filepath.Join(dir, "t.0"))
			}

			st, size := buildStore(t, dir, log)
			defer st.Close()
			want, wantOffset := int64(50), int64(49)
			if damaged { // empty: goka restores it from the changelog's start
				want, wantOffset = 0, -1
			}
			if *size != want {
				t.Errorf("reported size %d, want %d", *size, want)
			}
			if off, err := st.GetOffset(-1); err != nil || off != wantOffset {
				t.Errorf("stored offset %d (%v), want %d", off, err, wantOffset)
			}
			if got := strings.Contains(logs.String(), "table store damaged"); got != damaged {
				t.Errorf("damage logged: %v, want %v (log: %s)", got, damaged, logs.String())
			}
		})
	}
}
