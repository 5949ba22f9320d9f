package main

import (
	"context"
	"log/slog"

	"github.com/dedupkit/dedup/internal/guarantee"
)

// The --guarantee values.
const (
	ExactlyOnce = guarantee.ExactlyOnce
	BestEffort  = guarantee.BestEffort
)

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
