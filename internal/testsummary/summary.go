package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// event is one line of `go test -json`: cmd/test2json's TestEvent, plus the
// build-output and build-fail events go test adds for packages that do not
// compile (those carry ImportPath instead of Package).
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	Elapsed     float64
	FailedBuild string
	ImportPath  string
}

// Package results, as the table shows them.
const (
	resultOK          = "ok"
	resultFail        = "FAIL"
	resultBuildFailed = "build failed"
	resultNoTests     = "no test files"
	resultNoEnd       = "no result" // go test stopped before it reported the package
)

// pkgTally is what one package's events added up to. Subtests count on their
// own, so a table test with a failing case counts the case and its parent.
type pkgTally struct {
	path                    string
	passed, skipped, failed int
	result                  string // "" until the package's own pass, fail or skip
	elapsed                 float64
	started                 []string            // tests in the order they started
	running                 map[string]bool     // started, no pass, skip or fail yet
	held                    map[string][]string // output per running top-level test, printed only if it fails
	own                     map[string][]string // each running test's own output, for its skip reason
}

// testRef names one test in the lists under the table.
type testRef struct {
	pkg, test string
	note      string // the skip reason, or why a test counts as failed
}

// summarizer reads go test -json, writes the output a person would want to
// read while the tests run, and keeps the counts for report.
type summarizer struct {
	out     io.Writer
	verbose bool // every test's output, as go test -v prints it; otherwise only failing tests'
	pkgs    []*pkgTally
	byPath  map[string]*pkgTally
	skipped []testRef
	failed  []testRef
	events  int
}

func newSummarizer(out io.Writer, verbose bool) *summarizer {
	return &summarizer{out: out, verbose: verbose, byPath: map[string]*pkgTally{}}
}

// read consumes go test -json's standard output until it ends. Lines that
// are not test events (go test prints some errors as plain text) are
// passed on unchanged.
func (s *summarizer) read(r io.Reader) error {
	br := bufio.NewReader(r) // not a Scanner: one event's Output can exceed its token limit
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			s.line(line)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read go test output: %w", err)
		}
	}
}

func (s *summarizer) line(line string) {
	var e event
	if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &e) != nil || e.Action == "" {
		io.WriteString(s.out, line)
		return
	}
	s.events++
	switch {
	case e.Package == "":
		if e.Action == "build-output" { // compiler errors: always shown, the package's fail event only points here
			io.WriteString(s.out, e.Output)
		}
	case e.Test == "":
		s.packageEvent(s.pkg(e.Package), e)
	default:
		s.testEvent(s.pkg(e.Package), e)
	}
}

func (s *summarizer) pkg(path string) *pkgTally {
	if p, ok := s.byPath[path]; ok {
		return p
	}
	p := &pkgTally{path: path, running: map[string]bool{}, held: map[string][]string{}, own: map[string][]string{}}
	s.pkgs = append(s.pkgs, p)
	s.byPath[path] = p
	return p
}

func (s *summarizer) packageEvent(p *pkgTally, e event) {
	switch e.Action {
	case "output":
		// The package's own lines come after its tests; a test still held
		// here was cut short (a timeout, a panic), and its output explains it.
		s.flushHeld(p)
		if s.verbose || e.Output != "PASS\n" { // plain go test prints only "ok" for a passing package
			io.WriteString(s.out, e.Output)
		}
	case "pass":
		s.end(p, resultOK, e.Elapsed)
	case "fail":
		result := resultFail
		if e.FailedBuild != "" {
			result = resultBuildFailed
		}
		s.end(p, result, e.Elapsed)
	case "skip":
		s.end(p, resultNoTests, e.Elapsed)
	}
}

func (s *summarizer) testEvent(p *pkgTally, e event) {
	top, _, _ := strings.Cut(e.Test, "/")
	switch e.Action {
	case "run":
		if !p.running[e.Test] {
			p.started = append(p.started, e.Test)
		}
		p.running[e.Test] = true
	case "output":
		p.own[e.Test] = append(p.own[e.Test], e.Output)
		if s.verbose {
			io.WriteString(s.out, e.Output)
		} else {
			p.held[top] = append(p.held[top], e.Output)
		}
	case "pass", "skip", "fail":
		switch e.Action {
		case "pass":
			p.passed++
		case "skip":
			p.skipped++
			s.skipped = append(s.skipped, testRef{pkg: p.path, test: e.Test, note: skipReason(p.own[e.Test])})
		case "fail":
			p.failed++
			s.failed = append(s.failed, testRef{pkg: p.path, test: e.Test})
		}
		delete(p.running, e.Test)
		delete(p.own, e.Test)
		if e.Test == top {
			if e.Action == "fail" {
				s.write(p.held[top])
			}
			delete(p.held, top)
		}
	}
}

// end records a package's result. Tests that started and never finished
// (the binary died under them) count as failed.
func (s *summarizer) end(p *pkgTally, result string, elapsed float64) {
	s.flushHeld(p)
	for _, name := range p.started {
		if p.running[name] {
			p.failed++
			s.failed = append(s.failed, testRef{pkg: p.path, test: name, note: "did not finish"})
		}
	}
	p.result, p.elapsed = result, elapsed
	p.started, p.running, p.own = nil, map[string]bool{}, map[string][]string{}
}

// flushHeld prints the held output of p's tests in the order they started.
func (s *summarizer) flushHeld(p *pkgTally) {
	for _, name := range p.started {
		if lines, ok := p.held[name]; ok {
			s.write(lines)
			delete(p.held, name)
		}
	}
}

func (s *summarizer) write(lines []string) {
	for _, l := range lines {
		io.WriteString(s.out, l)
	}
}

// logHead starts a line a test logged (t.Log, t.Skip): "file_test.go:12: ".
var logHead = regexp.MustCompile(`^\S+\.go:\d+: `)

// skipReason is the last entry a skipped test logged, which is its t.Skip
// message when it gave one, continuation lines joined; "" when it gave none.
func skipReason(output []string) string {
	var entry []string
	for i := len(output) - 1; i >= 0; i-- {
		l := strings.TrimSpace(output[i])
		framing := l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- ")
		if framing && len(entry) == 0 {
			continue
		}
		if framing {
			break
		}
		entry = append([]string{l}, entry...)
		if logHead.MatchString(l) {
			break
		}
	}
	return strings.Join(entry, " ")
}
