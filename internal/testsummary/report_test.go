package main

import (
	"strings"
	"testing"
)

func TestReport(t *testing.T) {
	for _, tc := range []struct {
		name    string
		samples []string
		status  int
		want    string
	}{
		{"all passed", []string{"notests", "pass"}, 0, `
==================== test summary ====================
PACKAGE                     PASSED  SKIPPED  FAILED      TIME  RESULT
example.com/sample/notests       0        0       0      0.0s  no test files
example.com/sample/pass          3        2       0      0.0s  ok
TOTAL                            3        2       0

Skipped (2):
  example.com/sample/pass TestNeedsBroker: pass_test.go:10: KAFKA_BROKERS not set: the integration tier is off
  example.com/sample/pass TestTable/two: pass_test.go:17: case two: needs a second line

PASS: 3 tests passed, 2 skipped
`},
		{"failures of every kind", []string{"pass", "fail", "build", "timeout"}, 1, `
==================== test summary ====================
PACKAGE                     PASSED  SKIPPED  FAILED      TIME  RESULT
example.com/sample/pass          3        2       0      0.0s  ok
example.com/sample/fail          2        0       3      0.0s  FAIL
example.com/sample/build         0        0       0      0.0s  build failed
example.com/sample/timeout       0        0       1      2.0s  FAIL
TOTAL                            5        2       4

Skipped (2):
  example.com/sample/pass TestNeedsBroker: pass_test.go:10: KAFKA_BROKERS not set: the integration tier is off
  example.com/sample/pass TestTable/two: pass_test.go:17: case two: needs a second line

Failed (4):
  example.com/sample/fail TestWrong
  example.com/sample/fail TestCases/bad
  example.com/sample/fail TestCases
  example.com/sample/timeout TestHangs (did not finish)

FAIL: 4 tests failed; 2 packages failed; 1 package did not build; go test exited with status 1
`},
		{"no events", nil, 0, `
==================== test summary ====================
PACKAGE  PASSED  SKIPPED  FAILED      TIME  RESULT
TOTAL         0        0       0

PASS, but no test events: was go test run with -json?
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSummarizer(&strings.Builder{}, false)
			if err := s.read(strings.NewReader(sample(t, tc.samples...))); err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			s.report(&out, tc.status)
			if out.String() != tc.want {
				t.Errorf("report:\n%s\nwant:\n%s", out.String(), tc.want)
			}
		})
	}
}

func TestSkipReason(t *testing.T) {
	for _, tc := range []struct {
		name   string
		output []string
		want   string
	}{
		{"t.Skip", []string{"=== RUN   TestX\n", "    x_test.go:10: no broker\n", "--- SKIP: TestX (0.00s)\n"}, "x_test.go:10: no broker"},
		{"continuation lines are joined", []string{"=== RUN   TestX/a\n", "    x_test.go:17: needs a\n", "        second line\n", "--- SKIP: TestX/a (0.00s)\n"},
			"x_test.go:17: needs a second line"},
		{"the last entry, after a t.Log", []string{"=== RUN   TestX\n", "    x_test.go:9: connecting\n", "    x_test.go:10: no broker\n", "--- SKIP: TestX (0.00s)\n"},
			"x_test.go:10: no broker"},
		{"t.SkipNow gives none", []string{"=== RUN   TestX\n", "--- SKIP: TestX (0.00s)\n"}, ""},
		{"nothing at all", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := skipReason(tc.output); got != tc.want {
				t.Errorf("skipReason = %q, want %q", got, tc.want)
			}
		})
	}
}
