package dedup

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// reasonConstants returns the values of the package's Reason* constants,
// read from its source so that a new one cannot be left out.
func reasonConstants(t *testing.T) map[string]string {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	consts := map[string]string{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			spec, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, name := range spec.Names {
				if !strings.HasPrefix(name.Name, "Reason") || i >= len(spec.Values) {
					continue
				}
				lit, ok := spec.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("%s is not a string literal", name.Name)
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				consts[name.Name] = v
			}
			return true
		})
	}
	if len(consts) < 5 {
		t.Fatalf("found only %d Reason constants: %v", len(consts), consts)
	}
	return consts
}

func TestDeadLetterReasonsHoldsEveryReason(t *testing.T) {
	reasons := DeadLetterReasons()
	for name, v := range reasonConstants(t) {
		if !slices.Contains(reasons, v) {
			t.Errorf("%s (%q) is missing from DeadLetterReasons()", name, v)
		}
	}
	for _, want := range []string{"not-json", "duplicate-field", "other"} {
		if !slices.Contains(reasons, want) {
			t.Errorf("%q is missing from DeadLetterReasons()", want)
		}
	}
	seen := map[string]bool{}
	for _, r := range reasons {
		if seen[r] {
			t.Errorf("%q twice in DeadLetterReasons()", r)
		}
		seen[r] = true
	}
}

// docReasons returns the backquoted labels of the parenthesised list that
// follows `dlq-reason` in text.
func docReasons(t *testing.T, text string) []string {
	t.Helper()
	m := regexp.MustCompile("`dlq-reason` \\(([^)]*)\\)").FindStringSubmatch(text)
	if m == nil {
		t.Fatal("no list of reasons after `dlq-reason` (...)")
	}
	var labels []string
	for _, l := range regexp.MustCompile("`([a-z-]+)`").FindAllStringSubmatch(m[1], -1) {
		labels = append(labels, l[1])
	}
	return labels
}

// The list of dead-letter reasons users read is the one the worker writes.
func TestDocumentedDeadLetterReasons(t *testing.T) {
	b, err := os.ReadFile("docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := docReasons(t, string(b))
	want := DeadLetterReasons()
	for _, r := range want {
		if !slices.Contains(documented, r) {
			t.Errorf("docs/operations.md, \"Dead-letter records\": reason %q is missing", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(want, r) {
			t.Errorf("docs/operations.md, \"Dead-letter records\": %q is no reason the worker writes", r)
		}
	}
}

func TestDocReasonsCanFail(t *testing.T) {
	got := docReasons(t, "plus: `dlq-reason` (`not-json`, `no-id`), `dlq-error`")
	if !slices.Equal(got, []string{"not-json", "no-id"}) {
		t.Errorf("docReasons = %v", got)
	}
}
