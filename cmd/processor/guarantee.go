package main

import (
	"context"
	"fmt"
	"log/slog"
)

// Guarantee names a delivery guarantee of the worker (its --guarantee values).
const (
	ExactlyOnce = "exactly-once"
	// BestEffort runs goka's own runtime. It is named after what it gives:
	// goka marks an event seen (LevelDB and changelog) in the callback and
	// emits the output asynchronously, so a kill between the two loses the
	// output, and a kill between output and offset commit repeats it.
	BestEffort = "best-effort"
)

// checkGuarantee says why g is not a --guarantee value.
func checkGuarantee(g string) error {
	switch g {
	case ExactlyOnce, BestEffort:
		return nil
	}
	return fmt.Errorf("%q is not %s or %s", g, ExactlyOnce, BestEffort)
}

// guaranteeText is what the worker promises under g, in the words it logs
// at start, so an operator reads the guarantee off the log rather than
// infers it from a mode's name.
func guaranteeText(g string) string {
	if g == ExactlyOnce {
		return "exactly-once: an event's Kafka outputs and dead letters, its seen mark and its input offset " +
			"commit together in one Kafka transaction (consumers must read read_committed); " +
			"side effects outside Kafka (HTTP calls, databases) are not covered and can repeat"
	}
	return "best-effort (goka's runtime): a crash or kill can lose or duplicate events; use exactly-once for a guarantee"
}

// logGuarantee states the guarantee at start; best-effort at warning level,
// since it is the weaker one and no test shows it keeps every event.
func logGuarantee(log *slog.Logger, g string) {
	level := slog.LevelInfo
	if g != ExactlyOnce {
		level = slog.LevelWarn
	}
	log.Log(context.Background(), level, "delivery guarantee", "guarantee", g, "means", guaranteeText(g))
}
