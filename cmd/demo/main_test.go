package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// The demo runs the real worker on kfake; this is the fast tier's end-to-end
// check that `make demo` prints what the README promises.
func TestDemo(t *testing.T) {
	for _, args := range [][]string{{"--handler", "forward"}, {"--handler", "settlements"}, {"--guarantee", "best-effort"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			var out bytes.Buffer
			if err := runDemo(ctx, args, &out); err != nil {
				t.Fatalf("demo: %v\n%s", err, out.String())
			}
			for _, want := range []string{"IN  orders: 13 records, 6 distinct events", "SKIPPED as duplicates: 4", ": 6 records (one per distinct event)", "DEAD-LETTERED to demo-dlq: 3 records", "reason=not-json", "reason=no-id", "reason=empty-value"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("demo output lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}
