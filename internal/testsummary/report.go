package main

import (
	"fmt"
	"io"
	"strings"
)

// report writes the table and the lists of skipped and failed tests, and
// returns the exit status: go test's own when it failed (status), else 1 if
// any test or package failed, else 0. A package go test never reported the
// end of counts as failed, and so do the tests it was running.
func (s *summarizer) report(w io.Writer, status int) int {
	for _, p := range s.pkgs {
		if p.result == "" {
			s.end(p, resultNoEnd, 0)
		}
	}
	width := len("PACKAGE")
	for _, p := range s.pkgs {
		width = max(width, len(p.path))
	}
	row := func(name, passed, skipped, failed, elapsed, result string) {
		line := fmt.Sprintf("%-*s  %6s  %7s  %6s  %8s  %s", width, name, passed, skipped, failed, elapsed, result)
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}

	fmt.Fprintf(w, "\n%s\n", strings.Repeat("=", 20)+" test summary "+strings.Repeat("=", 20))
	row("PACKAGE", "PASSED", "SKIPPED", "FAILED", "TIME", "RESULT")
	var passed, skipped, failed, badPkgs, noBuild int
	for _, p := range s.pkgs {
		row(p.path, fmt.Sprint(p.passed), fmt.Sprint(p.skipped), fmt.Sprint(p.failed), fmt.Sprintf("%.1fs", p.elapsed), p.result)
		passed, skipped, failed = passed+p.passed, skipped+p.skipped, failed+p.failed
		switch p.result {
		case resultBuildFailed:
			noBuild++
		case resultFail, resultNoEnd:
			badPkgs++
		}
	}
	row("TOTAL", fmt.Sprint(passed), fmt.Sprint(skipped), fmt.Sprint(failed), "", "")

	if len(s.skipped) > 0 {
		fmt.Fprintf(w, "\nSkipped (%d):\n", len(s.skipped))
		for _, t := range s.skipped {
			fmt.Fprintf(w, "  %s %s: %s\n", t.pkg, t.test, orNone(t.note))
		}
	}
	if len(s.failed) > 0 {
		fmt.Fprintf(w, "\nFailed (%d):\n", len(s.failed))
		for _, t := range s.failed {
			if t.note != "" {
				fmt.Fprintf(w, "  %s %s (%s)\n", t.pkg, t.test, t.note)
			} else {
				fmt.Fprintf(w, "  %s %s\n", t.pkg, t.test)
			}
		}
	}

	var problems []string
	if failed > 0 {
		problems = append(problems, plural(failed, "test")+" failed")
	}
	if badPkgs > 0 {
		problems = append(problems, plural(badPkgs, "package")+" failed")
	}
	if noBuild > 0 {
		problems = append(problems, plural(noBuild, "package")+" did not build")
	}
	if status != 0 {
		problems = append(problems, fmt.Sprintf("go test exited with status %d", status))
	}
	if s.events == 0 {
		problems = append(problems, "no test events: was go test run with -json?")
	}
	fmt.Fprintln(w)
	switch {
	case status != 0:
		fmt.Fprintf(w, "FAIL: %s\n", strings.Join(problems, "; "))
		return status
	case failed > 0 || badPkgs > 0 || noBuild > 0:
		fmt.Fprintf(w, "FAIL: %s\n", strings.Join(problems, "; "))
		return 1
	case len(problems) > 0:
		fmt.Fprintf(w, "PASS, but %s\n", strings.Join(problems, "; "))
		return 0
	}
	fmt.Fprintf(w, "PASS: %s passed, %d skipped\n", plural(passed, "test"), skipped)
	return 0
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func orNone(reason string) string {
	if reason == "" {
		return "(no reason given)"
	}
	return reason
}
