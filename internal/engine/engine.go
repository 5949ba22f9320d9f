package engine

import (
	"slices"

	"github.com/dedupkit/dedup"

	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/lovoo/goka"

	"github.com/dedupkit/dedup/codecs"
)

// KeyedTable reads and writes one partition of the group table under any key.
type KeyedTable interface {
	ValueOf(key string) any
	SetValueOf(key string, value any)
}

// KeyedContext is a goka.Context that reads and writes the group table under
// a key other than the record's, in the record's partition. goka's own
// context cannot, so dedup.RekeyNever runs only under the exactly-once runtime.
type KeyedContext interface {
	goka.Context
	KeyedTable
}

// LoopContext is a goka.Context of a runtime that can judge a re-keyed event
// where the loop would take it. LoopTable returns the table partition the
// loop topic delivers key to, when the runtime owns that partition and
// writes it in the same transaction as the message being processed; false
// otherwise. The topology then judges the event there at once: the same
// store and the same key as after the hop, without the hop's loop record,
// second consume and second decode. The exactly-once runtime commits all the
// partitions of a member in one transaction, so with one member every
// re-keyed event takes this path, with N members about one in N.
type LoopContext interface {
	goka.Context
	LoopTable(key string) (KeyedTable, bool)
}

// RecordEmitter is a goka.Context that writes records with ordered headers.
// goka's own context takes headers as a map, which loses their order and
// repeated keys; the topology uses this when the runtime offers it.
type RecordEmitter interface {
	EmitRecord(topic, key string, value []byte, headers dedup.Headers)
	LoopbackRecord(key string, value []byte, headers dedup.Headers)
}

// Process is the goka callback: ProcessRecord, with an error ending the
// callback through ctx.Fail as goka expects.
func Process(t *dedup.Topology, ctx goka.Context, msg any) {
	if err := ctx.Context().Err(); err != nil {
		// goka may hand over the partition's next record after one was
		// interrupted; processing it would commit an offset past the
		// interrupted one, which would then never be processed.
		ctx.DeferCommit()(fmt.Errorf("%w: %w", dedup.ErrInterrupted, err))
		return
	}
	err := ProcessRecord(t, ctx, msg)
	switch {
	case errors.Is(err, dedup.ErrInterrupted):
		// goka's Fail once its context is done (the interruption's usual
		// cause) only notes the error and commits the message all the
		// same; a deferred commit that fails does not commit it.
		ctx.DeferCommit()(err)
	case err != nil:
		ctx.Fail(err)
	}
}

// ProcessRecord processes one consumed record. From the input topic it
// decodes the event and finds its dedup key; when the record key is not the
// dedup key it loops the event to the dedup key's partition (the table is
// keyed by record key). With the record keyed by the dedup key it judges,
// runs the handler, emits the outputs and marks the key seen.
//
// A non-nil error means the runtime must not commit what this record wrote:
// dedup.ErrInterrupted when the handler stopped because ctx was cancelled; any
// other error is a fault of the runtime's context (dedup.RekeyNever on a runtime
// that cannot read the table by key).
func ProcessRecord(t *dedup.Topology, ctx goka.Context, msg any) error {
	raw, _ := msg.([]byte)
	var p *Prepared
	if pc, ok := ctx.(PreparedContext); ok {
		p = pc.Prepared()
	}
	if p == nil {
		p = Prepare(t, dedup.Record{Topic: string(ctx.Topic()), Partition: ctx.Partition(), Offset: ctx.Offset(),
			Timestamp: ctx.Timestamp(), Key: ctx.Key(), Headers: headersOf(ctx.Headers()), Value: raw})
	}
	if p.reason != "" {
		deadLetter(t, ctx, p, raw, p.reason, p.err)
		return nil
	}
	table := tableOf(ctx, p.key)
	if !p.fromLoop && p.key != ctx.Key() {
		switch {
		case t.Rekey == dedup.RekeyNever:
			if table.keyed == nil {
				return errors.New("rekey=never needs a runtime that reads the table by key (the exactly-once runtime)")
			}
			if ctx.Key() == "" {
				// Copies of one event are judged together only when they
				// share a record key; a keyless record lands on any
				// partition, so judging it there could let a duplicate by.
				deadLetter(t, ctx, p, raw, dedup.ReasonNoRecordKey, errors.New("record has no key, and with rekey=never an event is "+
					"judged in its record key's partition: key the records (by aggregate or event ID) or use rekey=always"))
				return nil
			}
		default:
			lt, ok := loopTable(ctx, p.key)
			if !ok {
				h := loopHeaders(p.recKey, p.headers, p.pos)
				if limit := maxRecord(ctx); limit > 0 && dedup.RecordSize(p.key, raw, h) > limit {
					deadLetter(t, ctx, p, raw, dedup.ReasonTooLarge, fmt.Errorf("the loop record to re-key it is %d bytes, more than the %d bytes a record may have",
						dedup.RecordSize(p.key, raw, h), limit))
					return nil
				}
				loopback(ctx, p.key, raw, h)
				observer(t).Rekeyed()
				return nil
			}
			table.keyed = lt
		}
	}
	return judge(t, ctx, table, p, raw)
}

// tableRef is the dedup table record of one key, read and written through
// the record's own key when it is the dedup key, else through keyed.
type tableRef struct {
	ctx   goka.Context
	keyed KeyedTable // the record's partition (KeyedContext) or the loop's (LoopContext); nil: neither
	key   string
}

func tableOf(ctx goka.Context, key string) tableRef {
	r := tableRef{ctx: ctx, key: key}
	if kc, ok := ctx.(KeyedContext); ok {
		r.keyed = kc
	}
	return r
}

// loopTable is the table partition the loop would deliver key to, when the
// runtime owns it (see LoopContext); false when ctx cannot tell (goka's).
func loopTable(ctx goka.Context, key string) (KeyedTable, bool) {
	lc, ok := ctx.(LoopContext)
	if !ok {
		return nil, false
	}
	return lc.LoopTable(key)
}

func (r tableRef) value() any {
	if r.key == r.ctx.Key() {
		return r.ctx.Value()
	}
	return r.keyed.ValueOf(r.key)
}

func (r tableRef) set(v any) {
	if r.key == r.ctx.Key() {
		r.ctx.SetValue(v)
		return
	}
	r.keyed.SetValueOf(r.key, v)
}

func emit(ctx goka.Context, topic, key string, value []byte, h dedup.Headers) {
	if e, ok := ctx.(RecordEmitter); ok {
		e.EmitRecord(topic, key, value, h)
		return
	}
	ctx.Emit(goka.Stream(topic), key, value, goka.WithCtxEmitHeaders(gokaHeaders(h)))
}

func loopback(ctx goka.Context, key string, value []byte, h dedup.Headers) {
	if e, ok := ctx.(RecordEmitter); ok {
		e.LoopbackRecord(key, value, h)
		return
	}
	ctx.Loopback(key, value, goka.WithCtxEmitHeaders(gokaHeaders(h)))
}

func judge(t *dedup.Topology, ctx goka.Context, table tableRef, p *Prepared, raw []byte) error {
	now := now(t)
	var existing *codecs.SeenRecord
	if v := table.value(); v != nil {
		existing = v.(*codecs.SeenRecord)
	}
	obs := observer(t)
	part := p.pos.Partition
	switch t.Table.Judge(existing, dedup.EventTime(p.event, p.pos), now) {
	case dedup.Duplicate:
		obs.Skipped(part)
		return nil
	case dedup.Expired:
		obs.Expired(part)
	case dedup.TooOld:
		obs.TooOld(part)
		switch t.StaleEvents {
		case dedup.StaleSkip:
			return nil
		case dedup.StaleDeadLetter:
			deadLetter(t, ctx, p, raw, dedup.ReasonTooOld, fmt.Errorf("event time %v is older than the retention %v: the table cannot judge it",
				dedup.EventTime(p.event, p.pos).UTC().Format(time.RFC3339), t.Table.Retention))
			return nil
		}
	}

	ev := &dedup.Event{Position: p.pos, Key: p.recKey, Headers: p.headers, Value: p.event.Raw,
		EventID: p.event.EventID, AggregateID: p.event.AggregateID, Envelope: p.event}
	outs, reason, err := handle(t, ctx.Context(), ev)
	if errors.Is(err, dedup.ErrInterrupted) {
		return err
	}
	if err == nil {
		if err = checkOutputs(t, outs); err != nil {
			reason = dedup.ReasonBadOutput
		} else if err = checkSizes(outs, t.Outputs, maxRecord(ctx)); err != nil {
			reason = dedup.ReasonTooLarge
		}
	}
	if err != nil {
		// Not marked: a re-drive from the dead-letter topic processes it.
		deadLetter(t, ctx, p, raw, reason, err)
		return nil
	}
	for _, m := range outs {
		topic := m.Topic
		if topic == "" {
			topic = t.Outputs[0]
		}
		emit(ctx, topic, m.Key, m.Value, m.Headers)
	}
	table.set(t.Table.Record(p.event, p.pos, now))
	obs.Processed(part, now.Sub(p.pos.Timestamp))
	return nil
}

// checkOutputs refuses messages to topics the topology did not declare, all
// of them before any is written: a handler's mistake dead-letters the event
// instead of writing part of its output.
func checkOutputs(t *dedup.Topology, outs []dedup.Message) error {
	for i, m := range outs {
		switch {
		case m.Topic == "" && len(t.Outputs) > 1:
			return fmt.Errorf("message %d has no topic, and the topology has %d outputs %v", i, len(t.Outputs), t.Outputs)
		case m.Topic != "" && !slices.Contains(t.Outputs, m.Topic):
			return fmt.Errorf("message %d is for topic %q, which is not an output of the topology %v", i, m.Topic, t.Outputs)
		}
	}
	return nil
}

// handle runs the handler with bounded retries and exponential backoff. It
// returns the dead-letter reason with an error, or dedup.ErrInterrupted when ctx
// ended: then nothing of the event may be kept.
func handle(t *dedup.Topology, ctx context.Context, ev *dedup.Event) ([]dedup.Message, string, error) {
	backoff := t.RetryBackoff
	for attempt := 0; ; attempt++ {
		outs, err := call(t, ctx, ev)
		if err == nil {
			return outs, "", nil
		}
		if ctx.Err() != nil {
			return nil, "", fmt.Errorf("%w: event %s: %w", dedup.ErrInterrupted, ev.EventID, err)
		}
		observer(t).HandlerError()
		var pe *panicError
		switch {
		case errors.As(err, &pe):
			logger(t).Error("handler panicked; the event goes to the dead-letter topic", "event", ev.EventID,
				"topic", ev.Topic, "partition", ev.Partition, "offset", ev.Offset, "panic", pe.value, "stack", string(pe.stack))
			return nil, dedup.ReasonHandlerPanic, err
		case dedup.IsPermanent(err):
			return nil, dedup.ReasonHandlerPermanent, err
		case attempt >= t.HandlerRetries:
			return nil, dedup.ReasonHandlerError, fmt.Errorf("handler failed %d times, last: %w", attempt+1, err)
		}
		logger(t).Warn("handler failed, retrying", "event", ev.EventID, "attempt", attempt+1, "err", err)
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, "", fmt.Errorf("%w: event %s, waiting to retry after: %w", dedup.ErrInterrupted, ev.EventID, err)
		case <-timer.C:
		}
		backoff *= 2
	}
}

// call runs the handler once, turning a panic into an error.
func call(t *dedup.Topology, ctx context.Context, ev *dedup.Event) (outs []dedup.Message, err error) {
	defer func() {
		if r := recover(); r != nil {
			outs, err = nil, &panicError{value: r, stack: debug.Stack()}
		}
	}()
	return t.Handler.Handle(ctx, ev)
}

// deadLetter writes the record to the dead-letter topic with the reason and
// where it was read from the input: for a record that came through the loop
// topic, the original input record's topic, partition, offset, key and
// headers.
func deadLetter(t *dedup.Topology, ctx goka.Context, p *Prepared, raw []byte, reason string, cause error) {
	pos, key, src := p.pos, p.recKey, p.headers
	if p.fromLoop && reason == dedup.ReasonBadLoopRecord { // no source to name: the loop record's own
		src = headersOf(ctx.Headers())
	}
	h := make(dedup.Headers, 0, len(src)+6)
	h = append(h, src...)
	h = append(h,
		dedup.Header{Key: dedup.HeaderDLQReason, Value: []byte(reason)},
		dedup.Header{Key: dedup.HeaderDLQError, Value: []byte(cause.Error())},
		dedup.Header{Key: dedup.HeaderDLQGroup, Value: []byte(t.Group)},
		dedup.Header{Key: dedup.HeaderDLQTopic, Value: []byte(pos.Topic)},
		dedup.Header{Key: dedup.HeaderDLQPartition, Value: []byte(strconv.Itoa(int(pos.Partition)))},
		dedup.Header{Key: dedup.HeaderDLQOffset, Value: []byte(strconv.FormatInt(pos.Offset, 10))})
	value, h := fitDeadLetter(key, raw, h, maxRecord(ctx))
	emit(ctx, t.DLQ, key, value, h)
	observer(t).DeadLettered(reason)
	logger(t).Warn("dead-lettered", "reason", reason, "topic", pos.Topic, "partition", pos.Partition, "offset", pos.Offset, "err", cause)
}

// panicError is a recovered handler panic.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.value) }
