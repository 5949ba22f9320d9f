package engine

import (
	"context"
	"errors"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/codecs"
)

// Runtime is what the engine asks of the runtime that consumed a record,
// for that record. Every method is always there: the engine asks each
// runtime the same questions, and a runtime that cannot do something says
// so by its answer (an error, false, 0), not by leaving a method out.
type Runtime interface {
	// Context is cancelled when the record's processing must stop
	// (shutdown, or its partition revoked); the handler runs under it.
	Context() context.Context
	// Table is the table partition of the record's own partition, to judge
	// key in. It fails when the runtime cannot read key there: goka's
	// context reads only under the record's own key. ErrTableElsewhere
	// says another member holds that table for now: the engine forwards
	// the event to it (Forward).
	Table(key string) (Table, error)
	// LoopTable is the table partition the loop topic delivers key to,
	// when the runtime owns it and writes it in the same transaction as
	// the record being processed; false otherwise. The engine then judges
	// a re-keyed event there at once: the same store and the same key as
	// after the hop, without the hop's loop record, second consume and
	// second decode. The exactly-once runtime commits all the partitions
	// of a member in one transaction, so with one member every re-keyed
	// event takes this path, with N members about one in N.
	LoopTable(key string) (Table, bool)
	// Emit writes a record to topic with its headers in order; Loopback
	// writes one to the loop topic, in key's partition; Forward writes one
	// to the loop topic's partition of the record's own partition number,
	// whose owner holds that partition's table.
	Emit(topic, key string, value []byte, h dedup.Headers) error
	Loopback(key string, value []byte, h dedup.Headers) error
	Forward(key string, value []byte, h dedup.Headers) error
	// MaxRecordBytes is the largest record the runtime's producer sends,
	// 0 when it does not know. The engine checks every record of an event
	// against it before writing any: a record the producer or a topic
	// refuses would fail the whole transaction again at every retry,
	// stopping every partition of the member for good, where a dead letter
	// stops only that event.
	MaxRecordBytes() int
}

// Table is one partition of the dedup table. Writes are part of the
// record's transaction (exactly-once) or of goka's table (at least once).
type Table interface {
	// Get is nil when key was not seen (or its record was swept).
	Get(key string) (*codecs.SeenRecord, error)
	Set(key string, rec *codecs.SeenRecord) error
}

// ErrTableElsewhere is Runtime.Table's answer when the runtime consumes the
// record's partition of an input but another member holds that partition's
// table: a new member takes an input partition over while its copy of the
// table warms up (a warm-up standby), and the old owner keeps judging. The
// engine then forwards an event it would judge in that table to the loop
// topic's partition of the same number, where that member judges it in the
// same table, as if it had consumed the record itself.
var ErrTableElsewhere = errors.New("the partition's table is held by another member")
