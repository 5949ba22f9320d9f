package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dedupkit/dedup/internal/verify"
	"github.com/dedupkit/dedup/redrive"
)

// update rewrites docs/configuration.md's generated tables instead of
// comparing them: go test ./cmd/processor -run TestConfigurationDoc -update
var update = flag.Bool("update", false, "rewrite the generated tables of docs/configuration.md")

const configurationDoc = "../../docs/configuration.md"

// regenerate is the one command that brings the document back in line with
// the flag sets; the document says it next to every generated table.
const regenerate = "go test ./cmd/processor -run TestConfigurationDoc -update"

// docSections are the flag sets docs/configuration.md documents, each
// between its own markers, built exactly as the commands build them so a
// flag added to a command cannot be missing from the document.
func docSections() []struct {
	name string
	fs   *flag.FlagSet
} {
	return []struct {
		name string
		fs   *flag.FlagSet
	}{
		{"processor run", (&Config{}).flags("processor run")},
		{"processor verify", verifyFlags(&verify.Config{}, new(int))},
		{"processor probe", probeFlags(new(string), new(string), new(time.Duration))},
		{"processor redrive", redriveFlagSet()},
		{"admin commands", newAdminFlags("processor admin").fs},
	}
}

func redriveFlagSet() *flag.FlagSet {
	fs, _ := redriveFlags(&redrive.Config{}, new(int))
	return fs
}

func beginMarker(name string) string {
	return fmt.Sprintf("<!-- BEGIN GENERATED: %s flags. Do not edit; regenerate with `%s` -->", name, regenerate)
}

func endMarker(name string) string {
	return fmt.Sprintf("<!-- END GENERATED: %s flags -->", name)
}

// flagTable renders one flag set as a Markdown table: every flag, its
// environment variable, its default as the flag package holds it, and its
// help text.
func flagTable(fs *flag.FlagSet) string {
	var b strings.Builder
	b.WriteString("| flag | environment variable | default | meaning |\n|---|---|---|---|\n")
	fs.VisitAll(func(f *flag.Flag) {
		def := "(none)"
		if f.DefValue != "" {
			def = "`" + f.DefValue + "`"
		}
		fmt.Fprintf(&b, "| `--%s` | `%s` | %s | %s |\n", f.Name, envName(f.Name), def, mdCell(f.Usage))
	})
	return b.String()
}

// mdCell keeps a help text from breaking the table or turning into HTML.
func mdCell(s string) string {
	return strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;", "\n", " ").Replace(s)
}

// renderConfigurationDoc replaces every generated section of doc with the
// current flag sets' tables; the prose around the markers is kept as it is.
func renderConfigurationDoc(doc string) (string, error) {
	for _, sec := range docSections() {
		begin, end := beginMarker(sec.name), endMarker(sec.name)
		i := strings.Index(doc, begin)
		j := strings.Index(doc, end)
		if i < 0 || j < i {
			return "", fmt.Errorf("%s: no section %q between the markers\n%s\n%s", configurationDoc, sec.name, begin, end)
		}
		doc = doc[:i+len(begin)] + "\n\n" + flagTable(sec.fs) + "\n" + doc[j:]
	}
	return doc, nil
}

// TestConfigurationDoc fails when docs/configuration.md's flag tables differ
// from the flag sets the binary builds: a flag added, renamed, given another
// default or help text without regenerating the document.
func TestConfigurationDoc(t *testing.T) {
	committed, err := os.ReadFile(configurationDoc)
	if err != nil {
		t.Fatal(err)
	}
	want, err := renderConfigurationDoc(string(committed))
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(configurationDoc, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(committed, []byte(want)) {
		t.Fatalf("%s is out of date with the flags; regenerate it with\n\t%s\nfirst differing line:\n%s",
			configurationDoc, regenerate, firstDiff(string(committed), want))
	}
}

// firstDiff shows the first line where the committed document and the
// regenerated one part, so the failure says which flag moved.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d\n committed:   %s\n regenerated: %s", i+1, gl, wl)
		}
	}
	return "(none)"
}

// TestConfigurationDocCatchesDrift checks the check: a document missing a
// flag, or one whose markers are gone, must not pass.
func TestConfigurationDocCatchesDrift(t *testing.T) {
	committed, err := os.ReadFile(configurationDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(committed)
	row := "| `--retention` |"
	i := strings.Index(doc, row)
	if i < 0 {
		t.Fatalf("%s has no row for --retention", configurationDoc)
	}
	n := strings.Index(doc[i:], "\n")
	stale := doc[:i] + doc[i+n+1:]
	if got, err := renderConfigurationDoc(stale); err != nil || got == stale {
		t.Fatalf("a document without --retention's row passed the check (err %v)", err)
	}
	if _, err := renderConfigurationDoc(strings.ReplaceAll(doc, endMarker("processor run"), "")); err == nil {
		t.Fatal("a document without the run section's end marker was accepted")
	}
}
