package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The worker binary links no embedded broker, no Kafka client other than the
// runtimes' own and no example code: the demo on franz-go's kfake is a
// command of its own (cmd/demo).
func TestBinaryLinksNoDemoCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps: %v\n%s", err, stderr)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/twmb/franz-go") ||
			strings.HasPrefix(pkg, "github.com/dedupkit/dedup/examples/") ||
			pkg == "github.com/dedupkit/dedup/internal/kafkatest" {
			t.Errorf("cmd/processor links %s", pkg)
		}
	}
}
