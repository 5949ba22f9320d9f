// Command processor is the exactly-once deduplicating stream processor.
//
//	processor run  --brokers .. --group .. --input .. --output ..   run the worker
//	processor version                                               which build this is
//
// main only wires: configuration is parsed and validated in config.go, the
// worker is assembled in run.go. The demo on an embedded broker is a command
// of its own (cmd/demo), so this binary links no embedded broker.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/dedupkit/dedup/internal/kafkautil"
)

const usage = `usage: processor <command> [flags]

commands:
  run            run the worker (processor run -h lists the flags)
  reset-offsets  move a stopped group's input offsets for a replay (--to, --dry-run)
  reset-state    delete a stopped group's table topic and local state (--yes)
  table          inspect a stopped worker's local table: table get <id> | table stats
  redrive        move dead letters back to their input once the cause is fixed (--reason, --dry-run)
  verify         check that every input event was output exactly once (processor verify -h)
  probe          ask a running worker's /healthz or /readyz; exit 0 on 200 (a container health check)
  version        print the version, commit and Go version of this build
`

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

func realMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	// SIGTERM and SIGINT cancel ctx; the worker then finishes the message in
	// hand, commits and closes (and leaves the group with
	// --leave-group-on-stop).
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var err error
	switch args[0] {
	case "run":
		var cfg *Config
		cfg, err = parseConfig("processor run", args[1:], os.LookupEnv)
		if err == nil {
			// SIGUSR1 stops the worker for good: it commits, closes and
			// leaves the consumer group (a scale-in, not a restart).
			forGood, stopForGood := signal.NotifyContext(context.Background(), syscall.SIGUSR1)
			defer stopForGood()
			err = runWorker(ctx, forGood, cfg, os.Stderr)
		}
	case "reset-offsets":
		err = runResetOffsets(args[1:], stdout)
	case "reset-state":
		err = runResetState(args[1:], stdout)
	case "table":
		err = runTable(args[1:], stdout)
	case "verify":
		err = runVerify(ctx, args[1:], stdout, stderr)
	case "redrive":
		err = runRedrive(ctx, args[1:], stdout, stderr)
	case "version":
		err = runVersion(args[1:], stdout)
	case "probe":
		err = runProbe(ctx, args[1:], os.LookupEnv, stdout)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "processor: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "processor %s: %v\n", args[0], kafkautil.Named(err))
		return 1
	}
	return 0
}
