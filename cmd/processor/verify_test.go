package main

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/dedupkit/dedup"
)

// verify takes --input and --key-type as run does: a comma-separated list
// from the flag or the environment (the flag winning), checked the same way.
func TestParseVerifyInputsAndKeyType(t *testing.T) {
	base := []string{"--brokers", "a:1", "--output", "out"}
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		inputs  []string
		keyType dedup.KeyType
		err     string
	}{
		{name: "one input, event IDs", args: append(base, "--input", "orders"),
			inputs: []string{"orders"}, keyType: dedup.KeyEventID},
		{name: "a list", args: append(base, "--input", "orders, orders-retry"),
			inputs: []string{"orders", "orders-retry"}, keyType: dedup.KeyEventID},
		{name: "from the environment", args: base, env: map[string]string{"PROCESSOR_INPUT": "eu.orders,us.orders"},
			inputs: []string{"eu.orders", "us.orders"}, keyType: dedup.KeyEventID},
		{name: "the flag wins", args: append(base, "--input", "in"), env: map[string]string{"PROCESSOR_INPUT": "eu.orders,us.orders"},
			inputs: []string{"in"}, keyType: dedup.KeyEventID},
		{name: "aggregate IDs", args: append(base, "--input", "orders", "--key-type", "aggregate-id"),
			inputs: []string{"orders"}, keyType: dedup.KeyAggregateID},
		{name: "aggregate IDs from the environment", args: append(base, "--input", "orders"),
			env: map[string]string{"PROCESSOR_KEY_TYPE": "aggregate-id"}, inputs: []string{"orders"}, keyType: dedup.KeyAggregateID},
		{name: "no input", args: base, err: "--input: required"},
		{name: "only commas", args: append(base, "--input", " "), err: "--input: required"},
		{name: "empty element", args: append(base, "--input", "x,,y"), err: `--input: "x,,y" names an empty topic`},
		{name: "named twice", args: append(base, "--input", "x, y,x"), err: `--input: "x" is named twice`},
		{name: "input is the output", args: append(base, "--input", "x,out"), err: `--input: "out" is also the output or dead-letter topic`},
		{name: "input is the dead-letter topic", args: append(base, "--input", "x,g-dlq", "--dlq", "g-dlq"),
			err: `--input: "g-dlq" is also the output or dead-letter topic`},
		{name: "unknown key type", args: append(base, "--input", "x", "--key-type", "aggregate"),
			err: `--key-type: "aggregate" is not event-id or aggregate-id`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _, err := parseVerify(tc.args, envMap(tc.env), io.Discard)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cfg.Inputs, tc.inputs) || cfg.KeyType != tc.keyType {
				t.Fatalf("inputs %q, key type %q; want %q, %q", cfg.Inputs, cfg.KeyType, tc.inputs, tc.keyType)
			}
		})
	}
}
