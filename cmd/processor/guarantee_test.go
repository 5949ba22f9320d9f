package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// The worker's first words name the guarantee and what it covers, so the
// log says what a mode gives, not only its name.
func TestLogGuaranteeStatesWhatTheModeGives(t *testing.T) {
	tests := []struct {
		guarantee string
		level     string
		want      []string
	}{
		{ExactlyOnce, "INFO", []string{"guarantee=exactly-once",
			"Kafka outputs and dead letters, its seen mark and its input offset commit together in one Kafka transaction",
			"side effects outside Kafka (HTTP calls, databases) are not covered"}},
		{BestEffort, "WARN", []string{"guarantee=best-effort",
			"best-effort (goka's runtime): a crash or kill can lose or duplicate events; use exactly-once for a guarantee"}},
	}
	for _, tt := range tests {
		t.Run(tt.guarantee, func(t *testing.T) {
			var buf bytes.Buffer
			logGuarantee(slog.New(slog.NewTextHandler(&buf, nil)), tt.guarantee)
			line := buf.String()
			for _, want := range append([]string{"level=" + tt.level, `msg="delivery guarantee"`}, tt.want...) {
				if !strings.Contains(line, want) {
					t.Errorf("log line %q lacks %q", line, want)
				}
			}
		})
	}
}
