package main

import (
	"bytes"
	"runtime"
	"strings"
	"testing"

	"github.com/dedupkit/dedup/internal/buildinfo"
)

func TestVersionCommand(t *testing.T) {
	tests := []struct {
		args   []string
		code   int
		stdout []string
		stderr string
	}{
		{[]string{"version"}, 0, []string{"version:      (devel)\n", "go:           " + runtime.Version() + "\n"}, ""},
		{[]string{"version", "--json"}, 1, nil, "flag provided but not defined: -json"},
		{[]string{"version", "now"}, 1, nil, `processor version: takes no arguments, got ["now"]`},
		{[]string{"help"}, 0, []string{"  version        print the version"}, ""},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := realMain(tt.args, &stdout, &stderr); code != tt.code {
				t.Errorf("exit %d, want %d; stderr %s", code, tt.code, stderr.String())
			}
			for _, want := range tt.stdout {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
				}
			}
			if !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.stderr, stderr.String())
			}
		})
	}
}

func TestWriteVersion(t *testing.T) {
	var b bytes.Buffer
	writeVersion(&b, buildinfo.Info{Version: "v1.2.0-3-gff8ccfa-dirty", Revision: "ff8ccfa0e1f2", Modified: true,
		CommitTime: "2026-03-01T10:00:00Z", BuildTime: "2026-03-02T08:00:00Z", GoVersion: "go1.26.8"})
	want := `version:      v1.2.0-3-gff8ccfa-dirty
commit:       ff8ccfa0e1f2-dirty
commit time:  2026-03-01T10:00:00Z
build time:   2026-03-02T08:00:00Z
go:           go1.26.8
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
