package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseRedrive(t *testing.T) {
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	cfg, show, err := parseRedrive([]string{"--group", "g", "--reason", "handler-error,too-old", "--reason", "handler-panic",
		"--from", "2026-12-01T00:00:00Z", "--to", "2026-12-02T00:00:00Z", "--partition", "0,2", "--from-offset", "5",
		"--to-offset", "9", "--limit", "3", "--dry-run", "--show", "7"},
		env(map[string]string{"PROCESSOR_BROKERS": "k1:9092,k2:9092"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Brokers, []string{"k1:9092", "k2:9092"}) || cfg.Group != "g" ||
		!slices.Equal(cfg.Reasons, []string{"handler-error", "too-old", "handler-panic"}) ||
		!cfg.From.Equal(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) || !cfg.To.Equal(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)) ||
		!slices.Equal(cfg.Partitions, []int32{0, 2}) || cfg.FromOffset != 5 || cfg.ToOffset != 9 || cfg.Limit != 3 || !cfg.DryRun || show != 7 {
		t.Errorf("parsed %+v, show %d", cfg, show)
	}

	// The command line's list replaces the environment's.
	cfg, _, err = parseRedrive([]string{"--reason", "too-old"},
		env(map[string]string{"PROCESSOR_BROKERS": "k:9092", "PROCESSOR_GROUP": "g", "PROCESSOR_REASON": "handler-error"}), io.Discard)
	if err != nil || !slices.Equal(cfg.Reasons, []string{"too-old"}) {
		t.Errorf("reasons %v (err %v), want the command line's only", cfg.Reasons, err)
	}
	cfg, _, err = parseRedrive(nil, env(map[string]string{"PROCESSOR_BROKERS": "k:9092", "PROCESSOR_GROUP": "g", "PROCESSOR_REASON": "handler-error"}), io.Discard)
	if err != nil || !slices.Equal(cfg.Reasons, []string{"handler-error"}) {
		t.Errorf("reasons %v (err %v), want the environment's", cfg.Reasons, err)
	}
}

func TestParseRedriveNamesTheBadFlag(t *testing.T) {
	ok := []string{"--brokers", "k:9092", "--group", "g"}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--group", "g"}, "--brokers:"},
		{[]string{"--brokers", "k:9092"}, "--group:"},
		{append(ok, "--from", "yesterday"), "-from"},
		{append(ok, "--to", "2026-12-01"), "-to"},
		{append(ok, "--from", "2026-12-02T00:00:00Z", "--to", "2026-12-01T00:00:00Z"), "--to:"},
		{append(ok, "--partition", "one"), "-partition"},
		{append(ok, "--partition", "-1"), "--partition:"},
		{append(ok, "--from-offset", "-1"), "--from-offset:"},
		{append(ok, "--to-offset", "3", "--from-offset", "3"), "--to-offset:"},
		{append(ok, "--limit", "-2"), "--limit:"},
		{append(ok, "--target", "g-loop"), "--target:"},
		{append(ok, "--show", "-1"), "--show:"},
		{append(ok, "--sasl-user", "u"), "--sasl-mechanism:"},
		{append(ok, "extra"), "unexpected arguments"},
	} {
		_, _, err := parseRedrive(tt.args, func(string) (string, bool) { return "", false }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err %v, want one naming %s", tt.args, err, tt.want)
		}
	}
}
