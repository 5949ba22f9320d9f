package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/dedupkit/dedup/internal/buildinfo"
)

// runVersion prints the build, the same values dedup_build_info exports, so
// a binary on disk can be matched with the instances a dashboard shows.
func runVersion(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("processor version", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: processor version\n\nprints the version, commit, commit time, build time and Go version of this binary")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("takes no arguments, got %q", fs.Args())
	}
	writeVersion(out, buildinfo.Read())
	return nil
}

func writeVersion(out io.Writer, info buildinfo.Info) {
	fmt.Fprintf(out, "version:      %s\n", info.Version)
	fmt.Fprintf(out, "commit:       %s\n", info.Commit())
	fmt.Fprintf(out, "commit time:  %s\n", info.CommitTime)
	fmt.Fprintf(out, "build time:   %s\n", info.BuildTime)
	fmt.Fprintf(out, "go:           %s\n", info.GoVersion)
}
