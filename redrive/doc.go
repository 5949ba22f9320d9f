// Package redrive moves dead letters back to the topic they were read
// from, once what made them fail is fixed: a downstream that was down, a
// handler bug. A handler error leaves its event unmarked in the table, so the
// copy a re-drive writes is processed as a first-seen event.
//
// # What is written
//
// Each re-driven dead letter becomes one record on the topic its
// dlq-source-topic header names (the input the worker read it from; for an
// event that went through the loop topic the engine names the original input,
// never <group>-loop), or on Config.Target. It keeps the dead letter's key,
// value, timestamp and original headers in order; the dead-letter headers
// (dlq-reason, dlq-error, dlq-group, dlq-source-*) are removed and one header
// is added, dlq-redriven-from: <dlq>/<partition>/<offset>, so the handler and
// whoever reads the input can tell a re-driven copy.
//
// It goes to the partition the event was first read from
// (dlq-source-partition) when the target has that partition, else to its
// key's hash partition (sarama's FNV-1a, as the worker's own producer; a
// Java producer's murmur2 may have chosen another). Under --rekey=never an
// event's table record lives in the partition the event arrived in, so a
// copy on another partition would be judged against another partition's
// table and could pass as first seen; under --rekey=always the partition
// does not matter for the judgement, and keeping it keeps a key's events in
// order.
//
// A dead letter is not re-drivable when its value was cut to fit the
// dead-letter topic (it has dlq-original-size: the value is not the event),
// when it has no source topic (bad-loop-record) and no Target is set, when
// the target would be the dead-letter topic, the group's loop or table topic
// or the state topic, or when the target topic does not exist. The report
// counts each of these by cause.
//
// # Exactly once, with filters
//
// A re-drive is usually partial: the handler-error dead letters of last
// night today, the too-old ones maybe next week. A consumer group's committed
// offset is one position per partition; committing past a record the
// filters skipped would lose it for tomorrow's re-drive, and not committing
// past it would re-drive everything after it again. So a re-drive keeps no
// offsets. Instead it records, per dead letter, that it was re-driven: a
// record keyed <dlq>/<partition>/<offset> in a compacted state topic
// (Config.StateTopic, default <group>-redrive), written in the same Kafka
// transaction as the re-driven copies. The transaction makes the two
// inseparable: a crash before the commit leaves neither, so the next run
// re-drives those dead letters again; after the commit both are there, and
// every later run skips them ("already re-driven"), whatever its filters. A
// re-drive run twice moves nothing the second time.
//
// The state topic's name is also the producer's transactional.id. A run
// first fences any earlier run with that ID (its open transaction is
// aborted) and only then reads the state topic, read_committed, so two runs
// at once cannot both re-drive the same dead letter: the older one fails
// with ErrFenced at its next commit.
//
// A second line of defence is the worker's own table. Should the state be
// lost (the state topic deleted, or another StateTopic given), the copies
// are written again, and the worker skips each one whose event a first copy
// already got through (it was marked seen then), within --retention. The
// output holds each event once either way; the state topic also keeps the
// input free of needless copies and the report honest.
//
// A state record whose dead letter is gone (below the dead-letter topic's
// log start, deleted by retention) is removed by the next run with a
// tombstone, so the state topic holds at most one small record per retained
// re-driven dead letter. A state record whose dead letter has another source
// position or timestamp belongs to an earlier dead-letter topic of the same
// name (deleted and created again) and does not count.
//
// A copy that fails again is dead-lettered again, as a new dead letter at a
// new offset, which a later re-drive moves once more. A run reads the
// dead-letter topic only up to the last stable offset it found at its start,
// so those never loop within one run.
package redrive
