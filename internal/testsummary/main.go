// Command testsummary runs `go test -json` and ends its output with a table
// of passed, skipped and failed tests per package and the reasons tests were
// skipped. Integration tests skip when their broker is missing, and plain go
// test only says "ok" for a package whose tests all skipped; the table makes
// that visible in a CI log.
//
//	testsummary [-v] [--] go test -json [flags] [packages]
//
// While the tests run it prints what plain go test would: each package's
// "ok" or "FAIL" line, compiler errors, and the whole output of failing
// tests (with -v, every test's output). It runs go test itself rather than
// reading a pipe, so go test's exit status cannot be lost: it exits with
// that status, or 1 if the events show a failure go test did not.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

func main() {
	verbose := flag.Bool("v", false, "print every test's output as it streams (as go test -v), not only failing tests'")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: testsummary [-v] [--] go test -json [flags] [packages]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	os.Exit(run(flag.Args(), *verbose, os.Stdout, os.Stderr))
}

// run runs the command in args, summarizing its standard output onto
// stdout; its standard error goes to stderr unchanged. It returns the exit
// status for testsummary.
func run(args []string, verbose bool, stdout, stderr io.Writer) int {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(stderr, "testsummary: %v\n", err)
		return 2
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "testsummary: %v\n", err)
		return 2
	}
	// An interrupt from a terminal reaches go test too (same process group);
	// a signal sent to this process alone is passed on, so go test can stop
	// its test binaries and the summary still shows how far they got.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(signals)
	go func() {
		for sig := range signals {
			cmd.Process.Signal(sig)
		}
	}()

	s := newSummarizer(stdout, verbose)
	readErr := s.read(pipe)
	status := exitStatus(cmd.Wait())
	if readErr != nil {
		fmt.Fprintf(stderr, "testsummary: %v\n", readErr)
		status = max(status, 1)
	}
	return s.report(stdout, status)
}

// exitStatus is the status a command's Wait error stands for; 1 when it was
// killed by a signal or could not be waited for.
func exitStatus(err error) int {
	if err == nil {
		return 0
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() > 0 {
		return exit.ExitCode()
	}
	return 1
}
