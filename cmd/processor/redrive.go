package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/dedupkit/dedup/redrive"
)

// listValue is a repeatable flag that also takes comma-separated lists. A
// value from the environment is replaced, not extended, by the command
// line's.
type listValue struct {
	set     func([]string) error
	vals    []string
	fromEnv bool
}

func (l *listValue) String() string { return "" }

func (l *listValue) Set(s string) error {
	if l.fromEnv {
		l.vals, l.fromEnv = nil, false
	}
	l.vals = append(l.vals, splitList(s)...)
	return l.set(l.vals)
}

// redriveFlags binds `processor redrive`'s flags; like run's, every flag
// can come from PROCESSOR_<FLAG>.
func redriveFlags(cfg *redrive.Config, show *int) (*flag.FlagSet, []*listValue) {
	fs := flag.NewFlagSet("processor redrive", flag.ContinueOnError)
	fs.Func("brokers", "comma-separated Kafka bootstrap brokers (required)", func(s string) error {
		cfg.Brokers = splitList(s)
		return nil
	})
	securityFlags(fs, &cfg.Security)
	fs.StringVar(&cfg.Group, "group", "", "the worker's consumer group (required); its dead letters are re-driven")
	fs.StringVar(&cfg.DLQ, "dlq", "", "dead-letter topic to read (default <group>-dlq)")
	fs.StringVar(&cfg.Target, "target", "", "topic to write every re-driven record to (default: the topic each dead letter was read from, dlq-source-topic)")
	fs.StringVar(&cfg.StateTopic, "state-topic", "", "compacted topic recording which dead letters were re-driven, and the re-drive's transactional ID (default <group>-redrive)")
	reasons := &listValue{set: func(v []string) error { cfg.Reasons = v; return nil }}
	fs.Var(reasons, "reason", "re-drive only dead letters with this dlq-reason, e.g. handler-error; repeatable or comma-separated (default: every reason)")
	timeFlag := func(name, usage string, t *time.Time) {
		fs.Func(name, usage, func(s string) error {
			v, err := time.Parse(time.RFC3339, s)
			if err != nil {
				return fmt.Errorf("%q is not an RFC 3339 time such as 2026-12-01T00:00:00Z", s)
			}
			*t = v
			return nil
		})
	}
	timeFlag("from", "only dead letters written at or after this time (RFC 3339)", &cfg.From)
	timeFlag("to", "only dead letters written before this time (RFC 3339)", &cfg.To)
	parts := &listValue{set: func(v []string) error {
		cfg.Partitions = cfg.Partitions[:0]
		for _, s := range v {
			p, err := strconv.ParseInt(s, 10, 32)
			if err != nil {
				return fmt.Errorf("%q is not a partition number", s)
			}
			cfg.Partitions = append(cfg.Partitions, int32(p))
		}
		return nil
	}}
	fs.Var(parts, "partition", "only this partition of the dead-letter topic; repeatable or comma-separated (default: all)")
	fs.Int64Var(&cfg.FromOffset, "from-offset", 0, "only dead letters at this offset or after, in each partition read")
	fs.Int64Var(&cfg.ToOffset, "to-offset", 0, "only dead letters before this offset, in each partition read (0: to the end)")
	fs.IntVar(&cfg.Limit, "limit", 0, "stop after re-driving this many (0: no limit); a later run goes on with the rest")
	fs.BoolVar(&cfg.DryRun, "dry-run", false, "print what would be re-driven, write nothing")
	fs.IntVar(show, "show", 20, "how many re-driven and not re-drivable dead letters to list with their offsets")
	return fs, []*listValue{reasons, parts}
}

// parseRedrive reads the environment, then the command line, then validates.
func parseRedrive(args []string, env func(string) (string, bool), stderr io.Writer) (redrive.Config, int, error) {
	var cfg redrive.Config
	var show int
	fs, lists := redriveFlags(&cfg, &show)
	fs.SetOutput(stderr)
	if err := setFromEnv(fs, env); err != nil {
		return cfg, 0, err
	}
	for _, l := range lists {
		l.fromEnv = len(l.vals) > 0
	}
	if err := parseArgs(fs, args); err != nil {
		return cfg, 0, err
	}
	err := cfg.Validate()
	if show < 0 {
		err = errors.Join(err, fmt.Errorf("--show: %d must not be negative", show))
	}
	return cfg, show, err
}

// runRedrive is `processor redrive`: it prints the report on stdout, also
// what was committed before an error.
func runRedrive(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, show, err := parseRedrive(args, os.LookupEnv, stderr)
	if err != nil {
		return err
	}
	// The report is the output; the log says only what goes wrong.
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	warnCleartext(cfg.Security, cfg.Logger)
	report, err := redrive.Run(ctx, cfg)
	if report != nil {
		report.Print(stdout, show)
	}
	return err
}
