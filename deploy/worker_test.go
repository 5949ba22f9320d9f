package deploy

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// repoRoot is the repository's root, seen from this module's directory.
const repoRoot = ".."

// workerVars is every environment variable `processor run` reads, with its
// flag's default, from the generated table in docs/configuration.md. The
// root module's TestConfigurationDoc fails when that table differs from the
// flag set the binary builds, so the table is the flag set; reading it here
// keeps this module from importing the command's main package.
func workerVars(t *testing.T) map[string]string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- BEGIN GENERATED: processor run flags.", "<!-- END GENERATED: processor run flags -->"
	text := string(doc)
	i, j := strings.Index(text, begin), strings.Index(text, end)
	if i < 0 || j < i {
		t.Fatalf("docs/configuration.md has no generated table for processor run between %q and %q", begin, end)
	}
	vars := map[string]string{}
	for _, line := range strings.Split(text[i:j], "\n") {
		cells := strings.Split(line, " | ")
		if len(cells) < 4 || !strings.HasPrefix(cells[0], "| `--") {
			continue
		}
		name := strings.Trim(cells[1], "`")
		def := strings.Trim(cells[2], "`")
		if def == "(none)" {
			def = ""
		}
		vars[name] = def
	}
	// A table that stopped parsing must not make every check pass vacuously.
	for _, want := range []string{"PROCESSOR_BROKERS", "PROCESSOR_INSTANCE_ID", "PROCESSOR_STATE_DIR", "PROCESSOR_HTTP_ADDR"} {
		if _, ok := vars[want]; !ok {
			t.Fatalf("docs/configuration.md's processor run table has no %s (read %d variables)", want, len(vars))
		}
	}
	return vars
}

func TestWorkerVars(t *testing.T) {
	vars := workerVars(t)
	tests := []struct{ name, def string }{
		{"PROCESSOR_HTTP_ADDR", ":8080"},
		{"PROCESSOR_STATE_DIR", "./state"},
		{"PROCESSOR_MEMORY_LIMIT_RATIO", "0.9"},
		{"PROCESSOR_BROKERS", ""},
	}
	for _, tt := range tests {
		if got, ok := vars[tt.name]; !ok || got != tt.def {
			t.Errorf("%s: default %q (found %v), want %q", tt.name, got, ok, tt.def)
		}
	}
	if _, ok := vars["PROCESSOR_SHOW"]; ok {
		t.Error("PROCESSOR_SHOW is processor verify's, not the worker's: the table was read past its section")
	}
}

// listenPort is the port of a --http-addr value such as ":8080".
func listenPort(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		t.Fatalf("--http-addr %q: no port (%v)", addr, err)
	}
	return port
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
