package processor

import (
	"context"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/engine"
)

// manualPartition marks produced messages whose partition is set by the
// runtime: changelog records (the table partition they belong to) and loop
// records (hashPartition of the key, the partition LoopTable judges in, or
// the forwarded message's own partition number).
type manualPartition struct{}

// txnContext is the engine.Runtime of one message under the exactly-once
// runtime. Writes do not leave the process: emits are queued for the
// transaction and table writes go to the partition's overlay, so nothing is
// visible until the transaction commits.
type txnContext struct {
	m         *member
	ctx       context.Context
	table     *partitionTable // of the message's partition; nil: another member holds it
	partition int32           // the message's
}

func (c *txnContext) Context() context.Context { return c.ctx }

// MaxRecordBytes is the largest record the member's producer sends.
func (c *txnContext) MaxRecordBytes() int { return c.m.tx.maxRecord }

// Table is the message's partition, which reads and writes any key: under
// dedup.RekeyNever an event is judged there under its dedup key.
// engine.ErrTableElsewhere while another member holds it (member.process).
func (c *txnContext) Table(string) (engine.Table, error) {
	if c.table == nil {
		return nil, engine.ErrTableElsewhere
	}
	return c.table, nil
}

// LoopTable is the table partition a record of key sent to the loop topic
// would come back to, when this member owns it.
func (c *txnContext) LoopTable(key string) (engine.Table, bool) {
	t := c.m.tables.byPartition[hashPartition(key, c.m.partitions)]
	if t == nil {
		return nil, false
	}
	return t, true
}

// Emit queues a record for the transaction; a failed send fails the
// transaction (txn.err), not the message.
func (c *txnContext) Emit(topic, key string, value []byte, headers dedup.Headers) error {
	c.m.queue(topic, key, value, recordHeaders(headers))
	return nil
}

// Loopback queues a loop record for the transaction, as Emit.
func (c *txnContext) Loopback(key string, value []byte, headers dedup.Headers) error {
	c.m.queueLoop(hashPartition(key, c.m.partitions), key, value, recordHeaders(headers))
	return nil
}

// Forward queues a loop record for the transaction, to the loop partition
// of the message's partition number, whose owner holds its table.
func (c *txnContext) Forward(key string, value []byte, headers dedup.Headers) error {
	c.m.queueLoop(c.partition, key, value, recordHeaders(headers))
	return nil
}
