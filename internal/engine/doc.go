// Package engine is the per-record logic both runtimes share: decode and
// find the dedup key (Prepare), loop a record to its key's partition, judge
// it against the table, run the handler, dead-letter, emit and mark
// (ProcessRecord). It reads a dedup.Topology and never writes it.
//
// The seam to a runtime is Runtime, asked the same questions by every
// runtime: the exactly-once runtime implements it on its transaction
// (processor's txnContext), goka's processor through gokaRuntime (Graph,
// Process). A record crosses it once each way: the runtime calls
// ProcessRecord with the record prepared, the engine calls back the
// runtime's table and writers and returns an error. Errors are values both
// ways, so a runtime decides what a failed table read means for its own
// transaction instead of recovering a panic; what a runtime cannot do it
// says in its answer, so the engine probes no interface per record.
//
// The table is asked for in two ways, the record's own partition (Table)
// and the partition the loop topic delivers a key to (LoopTable), rather
// than as one "where is this key judged" question: where a key is judged
// is the re-key policy (dedup.RekeyNever, loop records, the loop
// shortcut), and it stays here, written once, while a runtime only says
// which partitions it holds.
package engine
