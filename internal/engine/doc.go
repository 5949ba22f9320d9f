// Package engine is the per-record logic both runtimes share: decode and
// find the dedup key (Prepare), loop a record to its key's partition, judge
// it against the table, run the handler, dead-letter, emit and mark
// (ProcessRecord). It runs on a goka.Context, so the same code runs under
// goka's processor and under the exactly-once runtime; the optional
// interfaces here (KeyedContext, LoopContext, RecordEmitter, RecordLimiter,
// PreparedContext) are what the exactly-once runtime's context adds. It
// reads a dedup.Topology and never writes it.
package engine
