package main

import (
	"bytes"
	"strings"
	"testing"
)

// -h prints the command's help to stdout or stderr and exits 0, and the
// admin commands' help marks the flags each requires.
func TestHelp(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"-h"}, []string{"  reset-offsets  move", "  verify         check"}},
		{[]string{"table", "-h"}, []string{"usage: processor table get <id> | stats"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := realMain(tt.args, &stdout, &stderr); code != 0 {
				t.Errorf("exit %d, want 0\n%s", code, stderr.String())
			}
			out := stdout.String() + stderr.String()
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("help lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestAdminHelpMarksRequiredFlags(t *testing.T) {
	a := newAdminFlags("processor reset-offsets")
	var out bytes.Buffer
	a.fs.SetOutput(&out)
	if err := a.parse([]string{"-h"}, "brokers", "group", "input"); err == nil {
		t.Fatal("parse -h: no error")
	}
	for _, w := range []string{"brokers (required)", "consumer group (required)", "comma-separated (required)"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("help lacks %q:\n%s", w, out.String())
		}
	}
	if strings.Contains(out.String(), "state directory (required)") {
		t.Errorf("help marks --state-dir required:\n%s", out.String())
	}
}
