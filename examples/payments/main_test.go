package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"
)

// The demo runs the real exactly-once worker on the embedded broker with
// calls in flight: every request charged once, each account's in order
// (testdata/demo.golden).
func TestDemo(t *testing.T) {
	want, err := os.ReadFile("testdata/demo.golden")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := parseFlags([]string{"--concurrency", "8", "--provider-latency", "50ms"})
	if err != nil {
		t.Fatal(err)
	}
	cfg.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, cfg, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if out.String() != string(want) {
		t.Errorf("demo printed\n%s\nwant (testdata/demo.golden)\n%s", out.String(), want)
	}
}

func TestFlags(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		wantErr string // "" for none
	}{
		{nil, ""},
		{[]string{"--brokers", "k1:9092", "--state-dir", "/tmp/s", "--concurrency", "1000"}, ""},
		{[]string{"--brokers", "k1:9092"}, "--state-dir: required with --brokers"},
		{[]string{"--concurrency", "0"}, "--concurrency: 0: want 1 or more"},
		{[]string{"--provider-latency", "-1s"}, "--provider-latency: -1s must not be negative"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			cfg, err := parseFlags(tt.args)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("err %v", err)
				}
				if _, err := topology(cfg); err != nil {
					t.Fatalf("topology: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err %v, want %q", err, tt.wantErr)
			}
		})
	}
}
