package deploy

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/dedupkit/dedup/internal/wire"
)

var loadScript = filepath.Join(repoRoot, "deploy", "compose", "load.sh")

// TestLoadScript runs the stack's load generator with its records written
// to stdout instead of Kafka, and decodes them with the worker's own
// decoder: every record must be an event the worker accepts (none
// dead-lettered), every copy byte for byte an earlier record, keyed by its
// aggregate.
func TestLoadScript(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on this machine")
	}
	tests := []struct {
		events, batch, every string
		records, distinct    int
	}{
		{"100", "30", "5", 120, 100},
		{"7", "1000", "5", 8, 7},
		{"9", "2", "3", 11, 9}, // no copy of event 0 at the third
	}
	for _, tt := range tests {
		t.Run(tt.events+"/"+tt.every, func(t *testing.T) {
			cmd := exec.Command(sh, loadScript)
			cmd.Env = append(os.Environ(), "LOAD_OUTPUT=-", "LOAD_PAUSE=0", "LOAD_RUN=test",
				"LOAD_EVENTS="+tt.events, "LOAD_BATCH="+tt.batch, "LOAD_DUPLICATE_EVERY="+tt.every)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%v: %s", err, stderr.String())
			}
			lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
			if len(lines) != tt.records {
				t.Fatalf("%d records, want %d", len(lines), tt.records)
			}
			first := map[string]string{}
			dec := wire.Decoder{ID: wire.DefaultIDSource()}
			for _, line := range lines {
				key, value, ok := strings.Cut(line, "|")
				if !ok {
					t.Fatalf("record %q has no key|value", line)
				}
				ev, err := dec.Decode([]byte(value), nil)
				if err != nil {
					t.Fatalf("the worker would dead-letter %q: %v", value, err)
				}
				if ev.AggregateID != key || ev.OccurredAt.IsZero() {
					t.Errorf("record %q: key %q, aggregateId %q, occurredAt %v", line, key, ev.AggregateID, ev.OccurredAt)
				}
				if prev, seen := first[ev.EventID]; seen && prev != line {
					t.Errorf("copy of %s differs:\n%s\n%s", ev.EventID, prev, line)
				}
				if _, seen := first[ev.EventID]; !seen {
					first[ev.EventID] = line
				}
			}
			if len(first) != tt.distinct {
				t.Errorf("%d distinct events, want %d", len(first), tt.distinct)
			}
		})
	}
}

// TestComposeLoadService checks that the load service runs the script it
// mounts and sets only variables the script reads.
func TestComposeLoadService(t *testing.T) {
	p := loadCompose(t)
	load, err := p.GetService("load")
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(loadScript)
	if err != nil {
		t.Fatal(err)
	}
	mounted := slices.IndexFunc(load.Volumes, func(v types.ServiceVolumeConfig) bool {
		abs, _ := filepath.Abs(loadScript)
		return v.Source == abs && slices.Contains(load.Entrypoint, v.Target)
	})
	if mounted < 0 {
		t.Errorf("load runs %v, not the mounted %s", load.Entrypoint, loadScript)
	}
	read := map[string]bool{}
	for _, m := range regexp.MustCompile(`\$\{(LOAD_[A-Z_]+)`).FindAllStringSubmatch(string(script), -1) {
		read[m[1]] = true
	}
	for k := range load.Environment {
		if !read[k] {
			t.Errorf("load sets %s, which load.sh does not read (it reads %v)", k, slices.Sorted(maps.Keys(read)))
		}
	}
}
