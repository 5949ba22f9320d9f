package dedup

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Figures (throughput, ratios, seconds of failover, memory, durations of
// runs) are measured and written by `make bench`, `make bench-failover` and
// `make chaos` into the generated pages; nowhere else are they typed by
// hand. A document may quote one only in a paragraph that links the page
// that holds it, verbatim.

// figurePageRE matches a generated page by the name a link gives it.
var figurePageRE = regexp.MustCompile(`\b(?:benchmarks(?:-[a-z0-9-]+)?|reliability)\.md\b`)

// figureRE matches a figure: a number and a unit of measurement.
var figureRE = regexp.MustCompile(`(?:^|[^\w.,/-])(\d[\d,]*(?:\.\d+)?)\s?(x|events/s|ev/s|ms|s|min|MiB|GiB|MB|%)(?:[^\w/]|$)`)

// figureSettings are figures that are no measurement but a setting: a
// default of the worker, of Kafka or of a deployment file, or a load a test
// or a run applies. The check skips them wherever they occur.
var figureSettings = map[string]string{
	"10 s":    "the default session timeout and transaction timeout",
	"45 s":    "Kafka's default session timeout",
	"3 s":     "a session timeout a test sets; the bound of the key filter's start",
	"2 s":     "the default of --fence-stuck-after",
	"0.5 s":   "the stuck watch's interval; the earlier heartbeat bound",
	"0.25 s":  "the heartbeat interval's bound",
	"100 ms":  "the default commit interval and retry backoff",
	"20 ms":   "a handler's delay a test sets",
	"5 s":     "the local stack's scrape interval",
	"15 s":    "the transaction timeout and half of it: the grace period's bound",
	"20 s":    "twice the transaction timeout; a test's bound",
	"30 s":    "the peer address refresh interval",
	"60 s":    "the StatefulSet's grace period; the alert's threshold",
	"150 s":   "the StatefulSet's startup probe budget",
	"5 min":   "the default of --live-stall-after",
	"1 min":   "the default handler timeout",
	"95%":     "the memory alert's threshold",
	"160 MiB": "the memory a concurrent restore is allowed",
	"1 MiB":   "the changelog fetch size and the memtable size",
	"2 MiB":   "goleveldb's default memtable size",
	"8 MiB":   "the earlier changelog fetch size",
	"16 MiB":  "the tmpfs a disk-full test mounts",
	"200 MB":  "the memory limit of make bench's hold",
	"256 MiB": "the local stack's memory limit",
	"512 MiB": "the StatefulSet's memory limit",
	"500 MB":  "a rules test's input",
	"980 MB":  "a rules test's input",
}

// figureDocs are the hand-written documents checked: their prose (code
// blocks, inline code and, in deploy/, everything but comments skipped).
func figureDocs(t *testing.T) []string {
	t.Helper()
	docs := []string{"README.md", "CHANGELOG.md", "docs/operations.md", "docs/performance.md", "docs/library.md", "docs/architecture.md"}
	err := filepath.WalkDir("deploy", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch filepath.Ext(path) {
		case ".yaml", ".yml", ".sh":
			docs = append(docs, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// paragraphs splits a document into the units a figure must share a link
// with: paragraphs, list items and table rows of Markdown, comment blocks of
// YAML and shell. Code is left out: fenced blocks and inline code in
// Markdown (commands, flags and their sample output), non-comment lines
// elsewhere.
func paragraphs(name, text string) []string {
	markdown := strings.HasSuffix(name, ".md")
	var paras []string
	var cur []string
	flush := func() {
		if len(cur) > 0 {
			paras = append(paras, strings.Join(cur, "\n"))
			cur = nil
		}
	}
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if !markdown {
			comment, ok := strings.CutPrefix(trimmed, "#")
			if !ok || strings.HasPrefix(trimmed, "#!") {
				flush()
				continue
			}
			if _, after, ok := strings.Cut(line, " #"); ok && !strings.HasPrefix(trimmed, "#") {
				comment = after
			}
			cur = append(cur, comment)
			continue
		}
		if strings.HasPrefix(trimmed, "```") {
			fenced = !fenced
			flush()
			continue
		}
		if fenced {
			continue
		}
		switch {
		case trimmed == "", strings.HasPrefix(trimmed, "#"):
			flush()
			continue
		case strings.HasPrefix(trimmed, "|"):
			// A table is one unit: a link in its header covers its rows.
			if len(cur) > 0 && !strings.HasPrefix(strings.TrimSpace(cur[0]), "|") {
				flush()
			}
		case strings.HasPrefix(trimmed, "- "), strings.HasPrefix(trimmed, "* "), listItemRE.MatchString(trimmed):
			flush()
		}
		cur = append(cur, line)
	}
	flush()
	if markdown {
		inline := regexp.MustCompile("`[^`]*`")
		for i, p := range paras {
			paras[i] = inline.ReplaceAllString(p, "``")
		}
	}
	return paras
}

var listItemRE = regexp.MustCompile(`^\d+\. `)

// badFigures returns the figures of a document's paragraphs that are not
// verbatim on a generated page the same paragraph links; pages maps a
// page's file name to its text.
func badFigures(name, text string, pages map[string]string) []string {
	var bad []string
	for _, p := range paragraphs(name, text) {
		linked := figurePageRE.FindAllString(p, -1)
		for _, m := range figureRE.FindAllStringSubmatch(p, -1) {
			fig := strings.TrimSpace(m[0][strings.Index(m[0], m[1]):])
			fig = fig[:strings.LastIndex(fig, m[2])+len(m[2])]
			if _, ok := figureSettings[fig]; ok {
				continue
			}
			found := slices.ContainsFunc(linked, func(page string) bool {
				return strings.Contains(pages[page], fig)
			})
			if !found {
				line := strings.TrimSpace(p)
				if len(line) > 100 {
					i := max(0, strings.Index(line, fig)-50)
					line = "…" + line[i:min(len(line), i+100)] + "…"
				}
				bad = append(bad, fmt.Sprintf("%s: %q is on no generated page this paragraph links (%v): %s", name, fig, linked, line))
			}
		}
	}
	return bad
}

func generatedPages(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages := map[string]string{}
	for _, f := range files {
		if !figurePageRE.MatchString(filepath.Base(f)) || figurePageRE.FindString(filepath.Base(f)) != filepath.Base(f) {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pages[filepath.Base(f)] = string(b)
	}
	if len(pages) < 2 {
		t.Fatalf("found only %d generated pages in docs/", len(pages))
	}
	return pages
}

func TestFiguresComeFromGeneratedPages(t *testing.T) {
	pages := generatedPages(t)
	for _, doc := range figureDocs(t) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range badFigures(doc, string(b), pages) {
			t.Error(bad)
		}
	}
}

func TestBadFiguresAreFound(t *testing.T) {
	pages := map[string]string{"benchmarks.md": "| worker | 167934 | 4.85x | 135 MiB |", "reliability.md": "0 missing"}
	tests := []struct {
		name, doc, text string
		bad             int
	}{
		{"copied and rounded", "README.md", "The worker is 4.9x Redis ([benchmarks.md](docs/benchmarks.md)).", 1},
		{"verbatim from the linked page", "README.md", "The worker is 4.85x Redis ([benchmarks.md](docs/benchmarks.md)).", 0},
		{"verbatim but the page is not linked", "README.md", "The worker is 4.85x Redis.", 1},
		{"linked by another paragraph", "README.md", "See [benchmarks.md](docs/benchmarks.md).\n\nIt holds 135 MiB.", 1},
		{"a row of a table whose header links the page", "docs/performance.md", "| [benchmarks.md](benchmarks.md) | RSS |\n|---|---|\n| worker | 135 MiB |", 0},
		{"a setting", "docs/operations.md", "The transaction timeout (10 s) aborts it.", 0},
		{"inside code", "docs/operations.md", "Run `bench -rate 4000` at 2.5 s.\n\n```\nok 12.3s\n```", 1},
		{"a YAML comment", "deploy/k8s/statefulset.yaml", "  # holds 138 MiB RSS (docs/benchmarks.md)\n  memory: 512Mi # 512 MiB", 1},
		{"a YAML comment linking the page", "deploy/k8s/statefulset.yaml", "  # holds 135 MiB RSS (docs/benchmarks.md)", 0},
		{"events per second", "CHANGELOG.md", "- The worker ran at 167,934 events/s.", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := badFigures(tt.doc, tt.text, pages); len(got) != tt.bad {
				t.Errorf("badFigures = %q, want %d", got, tt.bad)
			}
		})
	}
}
