package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/verify"
)

// verifyFlags binds `processor verify`'s flags. The input, key and ID flags
// are the same as `processor run`'s, so the verifier computes the worker's
// dedup keys, and like run's every flag can come from PROCESSOR_<FLAG>.
func verifyFlags(cfg *verify.Config, show *int) *flag.FlagSet {
	fs := flag.NewFlagSet("processor verify", flag.ContinueOnError)
	fs.Func("brokers", "comma-separated Kafka bootstrap brokers (required)", func(s string) error {
		cfg.Brokers = splitList(s)
		return nil
	})
	securityFlags(fs, &cfg.Security)
	fs.Func("input", "comma-separated input topics the worker read (required; its --input); an event on two of them is one event", func(s string) error {
		cfg.Inputs = splitInputs(s)
		return nil
	})
	fs.StringVar(&cfg.Output, "output", "", "output topic the worker wrote (required)")
	fs.StringVar(&cfg.DLQ, "dlq", "", "dead-letter topic; when set, its records are counted by dlq-reason")
	fs.StringVar((*string)(&cfg.KeyType), "key-type", string(dedup.KeyEventID),
		"the worker's dedup key (its --key-type): event-id or aggregate-id (then each aggregate must be output once)")
	fs.StringVar(&cfg.IDSource.Field, "id-field", "eventId", "JSON field holding the event ID; a dotted path (meta.eventId) reads nested objects")
	fs.StringVar(&cfg.IDSource.Header, "id-header", "", "take the event ID from this header (CloudEvents binary mode: ce_id)")
	fs.StringVar(&cfg.IDSource.SourceHeader, "id-source-header", "", "header that makes the header ID unique (default ce_source when --id-header=ce_id)")
	fs.IntVar(show, "show", 20, "how many missing, duplicated and unexpected events to list with their offsets")
	return fs
}

// parseVerify reads the environment, then the command line, then validates.
func parseVerify(args []string, env func(string) (string, bool), stderr io.Writer) (verify.Config, int, error) {
	var cfg verify.Config
	var show int
	fs := verifyFlags(&cfg, &show)
	fs.SetOutput(stderr)
	if err := setFromEnv(fs, env); err != nil {
		return cfg, 0, err
	}
	if err := parseArgs(fs, args); err != nil {
		return cfg, 0, err
	}
	if cfg.IDSource.SourceHeader == "" && cfg.IDSource.Header == "ce_id" {
		cfg.IDSource.SourceHeader = "ce_source"
	}
	err := cfg.Validate()
	if show < 0 {
		err = errors.Join(err, fmt.Errorf("--show: %d must not be negative", show))
	}
	return cfg, show, err
}

// runVerify is `processor verify`: it prints the report on stdout and
// returns the report's FAIL error, so main exits 1 and its last line says
// why.
func runVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, show, err := parseVerify(args, os.LookupEnv, stderr)
	if err != nil {
		return err
	}
	report, err := verify.Run(ctx, cfg)
	if err != nil {
		return err
	}
	report.Print(stdout, show)
	return report.Err()
}
