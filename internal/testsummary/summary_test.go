package main

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
)

// The samples in testdata are real `go test -json` output of throwaway
// packages (module example.com/sample): pass has a passing test, a skipped
// one and a table test with a skipped case; fail a failing test and a failing
// case; build does not compile; panic panics in its second test; timeout runs
// past -timeout 2s; setup names a directory that does not exist; notests has
// no test files.
func sample(t *testing.T, names ...string) string {
	t.Helper()
	var b strings.Builder
	for _, n := range names {
		data, err := os.ReadFile("testdata/" + n + ".json")
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.String()
}

// tally is a package's counts and result as "passed/skipped/failed result".
func tally(s *summarizer) map[string]string {
	out := map[string]string{}
	for _, p := range s.pkgs {
		out[strings.TrimPrefix(p.path, "example.com/sample/")] = fmt.Sprintf("%d/%d/%d %s", p.passed, p.skipped, p.failed, p.result)
	}
	return out
}

func refs(list []testRef) []string {
	var out []string
	for _, r := range list {
		s := r.test
		if r.note != "" {
			s += ": " + r.note
		}
		out = append(out, s)
	}
	return out
}

func TestSummarizer(t *testing.T) {
	for _, tc := range []struct {
		name       string
		input      string
		status     int // go test's exit status
		verbose    bool
		tally      map[string]string
		skipped    []string
		failed     []string
		exit       int
		stream     []string // in the streamed output, in this order
		notStreams []string
	}{
		{name: "passing tests and skips: only the ok line streams", input: sample(t, "pass"),
			tally: map[string]string{"pass": "3/2/0 ok"},
			skipped: []string{
				"TestNeedsBroker: pass_test.go:10: KAFKA_BROKERS not set: the integration tier is off",
				"TestTable/two: pass_test.go:17: case two: needs a second line"},
			stream:     []string{"ok  \texample.com/sample/pass\t0.003s\n"},
			notStreams: []string{"=== RUN", "a log line of a passing test", "PASS\n", "KAFKA_BROKERS"}},
		{name: "verbose streams every test's output", input: sample(t, "pass"), verbose: true,
			tally:   map[string]string{"pass": "3/2/0 ok"},
			skipped: []string{"TestNeedsBroker: pass_test.go:10: KAFKA_BROKERS not set: the integration tier is off", "TestTable/two: pass_test.go:17: case two: needs a second line"},
			stream:  []string{"=== RUN   TestAdds\n", "a log line of a passing test", "--- SKIP: TestNeedsBroker", "PASS\n", "ok  \texample.com/sample/pass"}},
		{name: "failing tests: their whole output streams, a parent fails with its case", input: sample(t, "fail"), status: 1,
			tally:      map[string]string{"fail": "2/0/3 FAIL"},
			failed:     []string{"TestWrong", "TestCases/bad", "TestCases"},
			exit:       1,
			stream:     []string{"before the failure", "got 1, want 2", "--- FAIL: TestWrong", "=== RUN   TestCases/good", "bad case", "--- FAIL: TestCases ", "FAIL\texample.com/sample/fail"},
			notStreams: []string{"TestOK"}},
		{name: "build failure: compiler errors stream", input: sample(t, "build"), status: 1,
			tally:  map[string]string{"build": "0/0/0 build failed"},
			exit:   1,
			stream: []string{"build/build.go:3:28: cannot use", "FAIL\texample.com/sample/build [build failed]"}},
		{name: "setup failure counts as a build failure", input: sample(t, "setup"), status: 1,
			tally:  map[string]string{"./nosuchpkg": "0/0/0 build failed"},
			exit:   1,
			stream: []string{"directory not found", "[setup failed]"}},
		{name: "panic: the test fails, its trace streams", input: sample(t, "panic"), status: 1,
			tally:      map[string]string{"panics": "1/0/1 FAIL"},
			failed:     []string{"TestNilMap"},
			exit:       1,
			stream:     []string{"--- FAIL: TestNilMap", "panic: assignment to entry in nil map", "panics_test.go:9", "FAIL\texample.com/sample/panics"},
			notStreams: []string{"TestBefore", "TestNeverRuns"}},
		{name: "timeout: the running test did not finish, its trace streams before the package's FAIL", input: sample(t, "timeout"), status: 1,
			tally:  map[string]string{"timeout": "0/0/1 FAIL"},
			failed: []string{"TestHangs: did not finish"},
			exit:   1,
			stream: []string{"=== RUN   TestHangs", "panic: test timed out after 2s", "timeout_test.go:8", "FAIL\texample.com/sample/timeout"}},
		{name: "no test files", input: sample(t, "notests"),
			tally:  map[string]string{"notests": "0/0/0 no test files"},
			stream: []string{"[no test files]"}},
		{name: "several packages", input: sample(t, "notests", "pass", "fail"), status: 1,
			tally:   map[string]string{"notests": "0/0/0 no test files", "pass": "3/2/0 ok", "fail": "2/0/3 FAIL"},
			skipped: []string{"TestNeedsBroker: pass_test.go:10: KAFKA_BROKERS not set: the integration tier is off", "TestTable/two: pass_test.go:17: case two: needs a second line"},
			failed:  []string{"TestWrong", "TestCases/bad", "TestCases"},
			exit:    1,
			stream:  []string{"[no test files]", "ok  \texample.com/sample/pass", "got 1, want 2", "FAIL\texample.com/sample/fail"}},
		{name: "go test's own status wins", input: sample(t, "pass"), status: 2,
			tally:   map[string]string{"pass": "3/2/0 ok"},
			skipped: []string{"TestNeedsBroker: pass_test.go:10: KAFKA_BROKERS not set: the integration tier is off", "TestTable/two: pass_test.go:17: case two: needs a second line"},
			exit:    2},
		{name: "a failure in the events fails even when go test exited 0", input: sample(t, "fail"),
			tally:  map[string]string{"fail": "2/0/3 FAIL"},
			failed: []string{"TestWrong", "TestCases/bad", "TestCases"},
			exit:   1},
		{name: "go test stopped mid-package: the package and its running test fail", input: strings.Join(strings.SplitAfter(sample(t, "pass"), "\n")[:9], ""),
			tally:   map[string]string{"pass": "1/0/1 no result"},
			failed:  []string{"TestNeedsBroker: did not finish"},
			exit:    1,
			stream:  []string{"KAFKA_BROKERS not set"},
			skipped: nil},
		{name: "errors before any event (go.mod broken) keep go test's status", status: 1, tally: map[string]string{}, exit: 1},
		{name: "lines that are not events pass through", input: "go: downloading example.com/dep v1.0.0\n" + sample(t, "pass"),
			tally:   map[string]string{"pass": "3/2/0 ok"},
			skipped: []string{"TestNeedsBroker: pass_test.go:10: KAFKA_BROKERS not set: the integration tier is off", "TestTable/two: pass_test.go:17: case two: needs a second line"},
			stream:  []string{"go: downloading example.com/dep v1.0.0\n", "ok  \texample.com/sample/pass"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stream strings.Builder
			s := newSummarizer(&stream, tc.verbose)
			if err := s.read(strings.NewReader(tc.input)); err != nil {
				t.Fatal(err)
			}
			exit := s.report(io.Discard, tc.status)
			if got := tally(s); !maps.Equal(got, tc.tally) {
				t.Errorf("tally %v, want %v", got, tc.tally)
			}
			if got := refs(s.skipped); !slices.Equal(got, tc.skipped) {
				t.Errorf("skipped %q, want %q", got, tc.skipped)
			}
			if got := refs(s.failed); !slices.Equal(got, tc.failed) {
				t.Errorf("failed %q, want %q", got, tc.failed)
			}
			if exit != tc.exit {
				t.Errorf("exit status %d, want %d", exit, tc.exit)
			}
			rest := stream.String()
			for _, want := range tc.stream {
				i := strings.Index(rest, want)
				if i < 0 {
					t.Fatalf("streamed output lacks %q (or has it out of order):\n%s", want, stream.String())
				}
				rest = rest[i+len(want):]
			}
			for _, unwanted := range tc.notStreams {
				if strings.Contains(stream.String(), unwanted) {
					t.Errorf("streamed output has %q:\n%s", unwanted, stream.String())
				}
			}
		})
	}
}
