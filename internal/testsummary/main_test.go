package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// With TESTSUMMARY_FAKE_GO_TEST=sample:status set, the test binary stands in
// for go test: it prints testdata/sample.json, a line on standard error, and
// exits with status.
func TestMain(m *testing.M) {
	if fake := os.Getenv("TESTSUMMARY_FAKE_GO_TEST"); fake != "" {
		name, status, _ := strings.Cut(fake, ":")
		data, err := os.ReadFile("testdata/" + name + ".json")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(99)
		}
		os.Stdout.Write(data)
		fmt.Fprintln(os.Stderr, "fake go test: a line on standard error")
		code, _ := strconv.Atoi(status)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

func TestRunKeepsTheExitStatusAndStandardError(t *testing.T) {
	for _, tc := range []struct {
		fake string
		exit int
		last string // the report's last line
	}{
		{"pass:0", 0, "PASS: 3 tests passed, 2 skipped"},
		{"fail:1", 1, "FAIL: 3 tests failed; 1 package failed; go test exited with status 1"},
		{"build:2", 2, "FAIL: 1 package did not build; go test exited with status 2"},
		{"fail:0", 1, "FAIL: 3 tests failed; 1 package failed"},
	} {
		t.Run(tc.fake, func(t *testing.T) {
			t.Setenv("TESTSUMMARY_FAKE_GO_TEST", tc.fake)
			var stdout, stderr strings.Builder
			exit := run([]string{os.Args[0]}, false, &stdout, &stderr)
			if exit != tc.exit {
				t.Errorf("exit status %d, want %d", exit, tc.exit)
			}
			if stderr.String() != "fake go test: a line on standard error\n" {
				t.Errorf("standard error %q, want the child's line", stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			if got := lines[len(lines)-1]; got != tc.last {
				t.Errorf("last line %q, want %q", got, tc.last)
			}
		})
	}
}

func TestRunReportsACommandThatDoesNotStart(t *testing.T) {
	var stdout, stderr strings.Builder
	if exit := run([]string{"./no-such-command"}, false, &stdout, &stderr); exit != 2 || !strings.Contains(stderr.String(), "no-such-command") {
		t.Errorf("exit %d, standard error %q; want 2 and the error", exit, stderr.String())
	}
}
