package processor

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/engine"
)

// ErrUnsupported is what Join, Lookup and DeferCommit fail with: the
// exactly-once runtime has no views and commits only in transactions.
var ErrUnsupported = errors.New("not supported by the exactly-once runtime")

// manualPartition marks produced messages whose partition is set by the
// runtime: changelog records (the table partition they belong to) and loop
// records (hashPartition of the key, the partition LoopTable judges in).
type manualPartition struct{}

// txnContext is the goka.Context of one message under the exactly-once
// runtime. Writes do not leave the process: emits are queued for the
// transaction and table writes go to the partition's overlay, so nothing is
// visible until the transaction commits.
type txnContext struct {
	m     *member
	ctx   context.Context
	msg   *sarama.ConsumerMessage
	key   string           // msg.Key as a string, converted once
	prep  *engine.Prepared // the topology's Prepare of msg, done on the claim's goroutine
	table *partitionTable  // of msg.Partition
}

// failure carries Fail's error out of the callback by panic, as goka does.
type failure struct{ err error }

func (c *txnContext) Topic() goka.Stream       { return goka.Stream(c.msg.Topic) }
func (c *txnContext) Key() string              { return c.key }
func (c *txnContext) Partition() int32         { return c.msg.Partition }
func (c *txnContext) Offset() int64            { return c.msg.Offset }
func (c *txnContext) Group() goka.Group        { return goka.Group(c.m.topo.Group) }
func (c *txnContext) Timestamp() time.Time     { return c.msg.Timestamp }
func (c *txnContext) Context() context.Context { return c.ctx }

// Headers is goka's view of the record's headers; the topology reads the
// ordered ones from Prepared.
func (c *txnContext) Headers() goka.Headers { return goka.HeadersFromSarama(c.msg.Headers) }

// MaxRecordBytes is the largest record the member's producer sends
// (engine.RecordLimiter).
func (c *txnContext) MaxRecordBytes() int { return c.m.maxRecord }

// Prepared is the topology's Prepare of the message (engine.PreparedContext).
func (c *txnContext) Prepared() *engine.Prepared { return c.prep }

func (c *txnContext) Value() any { return c.ValueOf(c.Key()) }

// ValueOf reads the table record of key in this message's partition
// (engine.KeyedContext, for topologies that do not re-key).
func (c *txnContext) ValueOf(key string) any { return c.table.ValueOf(key) }

// LoopTable is the table partition a record of key sent to the loop topic
// would come back to, when this member owns it (engine.LoopContext).
func (c *txnContext) LoopTable(key string) (engine.KeyedTable, bool) {
	t := c.m.tables[hashPartition(key, c.m.partitions)]
	if t == nil {
		return nil, false
	}
	return t, true
}

func (c *txnContext) SetValue(value any, options ...goka.ContextOption) {
	c.table.set(c.Key(), value, c.headers(options))
}

// SetValueOf writes the table record of key in this message's partition.
func (c *txnContext) SetValueOf(key string, value any) { c.table.set(key, value, nil) }

func (c *txnContext) Delete(options ...goka.ContextOption) {
	c.table.delete(c.Key(), c.headers(options))
}

func (c *txnContext) Emit(topic goka.Stream, key string, value any, options ...goka.ContextOption) {
	codec, ok := c.m.codecs.outputs[string(topic)]
	if !ok {
		c.Fail(fmt.Errorf("no Output edge for topic %s in the group graph", topic))
	}
	c.m.queue(string(topic), key, c.encode(codec, value), saramaHeaders(c.headers(options)))
}

// EmitRecord writes a record with its headers in order
// (engine.RecordEmitter). The topology's outputs pass bytes through.
func (c *txnContext) EmitRecord(topic, key string, value []byte, headers dedup.Headers) {
	c.m.queue(topic, key, value, recordHeaders(headers))
}

func (c *txnContext) Loopback(key string, value any, options ...goka.ContextOption) {
	if c.m.codecs.loop == nil {
		c.Fail(errors.New("no Loop edge in the group graph"))
	}
	c.m.queueLoop(key, c.encode(c.m.codecs.loop, value), saramaHeaders(c.headers(options)))
}

// LoopbackRecord sends a record to the loop topic (engine.RecordEmitter).
func (c *txnContext) LoopbackRecord(key string, value []byte, headers dedup.Headers) {
	c.m.queueLoop(key, value, recordHeaders(headers))
}

func (c *txnContext) encode(codec goka.Codec, value any) []byte {
	if value == nil {
		return nil
	}
	data, err := codec.Encode(value)
	if err != nil {
		c.Fail(fmt.Errorf("encode: %w", err))
	}
	return data
}

func (c *txnContext) Join(goka.Table) any { c.Fail(fmt.Errorf("Join: %w", ErrUnsupported)); return nil }
func (c *txnContext) Lookup(goka.Table, string) any {
	c.Fail(fmt.Errorf("Lookup: %w", ErrUnsupported))
	return nil
}
func (c *txnContext) DeferCommit() func(error) {
	c.Fail(fmt.Errorf("DeferCommit: %w", ErrUnsupported))
	return nil
}

// Fail stops the callback; the member aborts the transaction and the
// processor stops with err, like goka's.
func (c *txnContext) Fail(err error) { fail(err) }

func (c *txnContext) headers(options []goka.ContextOption) goka.Headers {
	if len(options) == 0 {
		return nil
	}
	h, err := optionHeaders(options)
	if err != nil {
		c.Fail(err)
	}
	return h
}

// optionHeaders reads the headers out of goka.WithCtxEmitHeaders options.
// goka keeps its option struct unexported, so a runtime of our own can only
// apply an option to a fresh struct of that type and read the field by
// reflection. A goka upgrade that renames the field fails loudly here (and in
// TestOptionHeaders), never silently drops headers.
func optionHeaders(options []goka.ContextOption) (goka.Headers, error) {
	var h goka.Headers
	for _, opt := range options {
		fn := reflect.ValueOf(opt)
		arg := reflect.New(fn.Type().In(0).Elem())
		fn.Call([]reflect.Value{arg})
		field := arg.Elem().FieldByName("emitHeaders")
		if !field.IsValid() || field.Kind() != reflect.Map {
			return nil, errors.New("goka.ContextOption: cannot read emit headers (goka internals changed)")
		}
		for it := field.MapRange(); it.Next(); {
			if h == nil {
				h = goka.Headers{}
			}
			h[it.Key().String()] = it.Value().Bytes()
		}
	}
	return h, nil
}

// The topology takes these faster paths when the context offers them.
var (
	_ engine.LoopContext     = (*txnContext)(nil)
	_ engine.RecordEmitter   = (*txnContext)(nil)
	_ engine.RecordLimiter   = (*txnContext)(nil)
	_ engine.PreparedContext = (*txnContext)(nil)
)
