package dedup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/lovoo/goka"

	"github.com/dedupkit/dedup/codecs"
)

// Dead-letter headers. The reason is a short label (see codecs.Reason); the
// error is the full message; the source headers say where the record was read.
const (
	HeaderDLQReason    = "dlq-reason"
	HeaderDLQError     = "dlq-error"
	HeaderDLQGroup     = "dlq-group"
	HeaderDLQTopic     = "dlq-source-topic"
	HeaderDLQPartition = "dlq-source-partition"
	HeaderDLQOffset    = "dlq-source-offset"

	// Reasons that are not decode errors.
	ReasonHandlerError   = "handler-error"
	ReasonTooOld         = "too-old"
	ReasonNoAggregateID  = "no-aggregate-id"
	ReasonBadLoopRecord  = "bad-loop-record"
	headerLoopSrcKey     = "dedup-src-key"
	headerLoopSrcTopic   = "dedup-src-topic"
	headerLoopSrcPart    = "dedup-src-partition"
	headerLoopSrcOffset  = "dedup-src-offset"
	headerLoopSrcTimeRFC = "dedup-src-time"
)

// StalePolicy is the Topology's choice for events older than the retention.
type StalePolicy string

const (
	StaleProcess    StalePolicy = "process"
	StaleSkip       StalePolicy = "skip"
	StaleDeadLetter StalePolicy = "dead-letter"
)

// RekeyPolicy says whether events whose record key is not their dedup key
// are looped through "<group>-loop" to the dedup key's partition.
type RekeyPolicy string

const (
	// RekeyAlways loops them, so an event is judged against every earlier
	// copy whatever record key and partition each copy had. The safe default.
	RekeyAlways RekeyPolicy = "always"
	// RekeyNever judges them in the partition they arrived in, under their
	// dedup key. Correct only when every copy of an event carries the same
	// record key (for example the aggregate ID, which per-aggregate ordering
	// needs anyway) and the input's partition count does not change; it
	// saves the loop's second produce, consume and decode of every event.
	// Needs a runtime whose context implements KeyedContext (exactly-once).
	RekeyNever RekeyPolicy = "never"
)

// KeyedTable reads and writes one partition of the group table under any key.
type KeyedTable interface {
	ValueOf(key string) any
	SetValueOf(key string, value any)
}

// KeyedContext is a goka.Context that reads and writes the group table under
// a key other than the record's, in the record's partition. goka's own
// context cannot, so RekeyNever runs only under the exactly-once runtime.
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

// HeaderEmitter is a goka.Context that takes emit headers directly. The
// topology uses it when the runtime offers it; goka's context takes them as
// a ContextOption.
type HeaderEmitter interface {
	EmitWithHeaders(topic goka.Stream, key string, value any, headers goka.Headers)
	LoopbackWithHeaders(key string, value any, headers goka.Headers)
}

// Topology is the goka graph of one consumer group: the input topic, the
// dedup table (goka group table "<group>-table", codec codecs.Seen), the
// output topic, a dead-letter topic and a loop topic "<group>-loop" for
// re-keying. Its Process callback is written against goka.Context, so it runs
// under goka.NewProcessor (at-least-once) and under the exactly-once runtime.
type Topology struct {
	Group  string
	Input  string
	Output string
	DLQ    string

	Table    Table
	IDSource codecs.IDSource
	Handler  Handler

	// HandlerRetries is how many times a failing handler is retried before the
	// event is dead-lettered; RetryBackoff is the first pause, doubled each time.
	HandlerRetries int
	RetryBackoff   time.Duration

	// StaleEvents is what happens to an unseen event older than the
	// retention, which the table cannot judge: process it (default), skip it
	// or dead-letter it. It is counted either way.
	StaleEvents StalePolicy

	// Rekey is RekeyAlways (default, also for "") or RekeyNever.
	Rekey RekeyPolicy

	Observer Observer         // nil: NopObserver
	Logger   *slog.Logger     // nil: slog.Default()
	Now      func() time.Time // nil: time.Now

	loopTopic string // LoopTopic, named once by Graph
}

// Validate reports a topology that cannot run; call it before Graph.
func (t *Topology) Validate() error {
	var errs []error
	if t.Group == "" {
		errs = append(errs, errors.New("group is empty"))
	}
	if t.Input == "" {
		errs = append(errs, errors.New("input topic is empty"))
	}
	if t.Output == "" {
		errs = append(errs, errors.New("output topic is empty"))
	}
	if t.DLQ == "" {
		errs = append(errs, errors.New("dead-letter topic is empty"))
	}
	if t.Input != "" && (t.Input == t.Output || t.Input == t.DLQ) {
		errs = append(errs, fmt.Errorf("input topic %q is also the output or dead-letter topic: events would loop forever", t.Input))
	}
	if t.Handler == nil {
		errs = append(errs, errors.New("handler is nil"))
	}
	switch t.StaleEvents {
	case "", StaleProcess, StaleSkip, StaleDeadLetter:
	default:
		errs = append(errs, fmt.Errorf("stale-event policy %q: want process, skip or dead-letter", t.StaleEvents))
	}
	switch t.Rekey {
	case "", RekeyAlways, RekeyNever:
	default:
		errs = append(errs, fmt.Errorf("rekey policy %q: want always or never", t.Rekey))
	}
	if t.HandlerRetries < 0 {
		errs = append(errs, errors.New("handler retries is negative"))
	}
	if err := t.Table.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := t.IDSource.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// TableTopic is the changelog topic of the dedup table.
func (t *Topology) TableTopic() string { return string(goka.GroupTable(goka.Group(t.Group))) }

// LoopTopic is the re-keying topic.
func (t *Topology) LoopTopic() string { return string(goka.Group(t.Group)) + "-loop" }

// Graph builds the goka group graph and fills in the defaults of Observer,
// Logger and Now, so a runtime calls it before the first Process. The input and loop codecs pass bytes
// through: decoding happens in the callback, where a bad record can be
// dead-lettered instead of stopping the processor.
func (t *Topology) Graph() *goka.GroupGraph {
	if t.Observer == nil {
		t.Observer = NopObserver{}
	}
	if t.Logger == nil {
		t.Logger = slog.Default()
	}
	if t.Now == nil {
		t.Now = time.Now
	}
	t.loopTopic = t.LoopTopic()
	return goka.DefineGroup(goka.Group(t.Group),
		goka.Input(goka.Stream(t.Input), codecs.Bytes{}, t.Process),
		goka.Loop(codecs.Bytes{}, t.Process),
		goka.Persist(codecs.Seen{}),
		goka.Output(goka.Stream(t.Output), codecs.Bytes{}),
		goka.Output(goka.Stream(t.DLQ), codecs.Bytes{}),
	)
}

// Process is the per-message callback. From the input topic it decodes the
// event and finds its dedup key; when the record key is not the dedup key it
// loops the event to the dedup key's partition (the table is keyed by record
// key). With the record keyed by the dedup key it judges, runs the handler,
// emits the outputs and marks the key seen, all in the same callback.
func (t *Topology) Process(ctx goka.Context, msg any) {
	raw, _ := msg.([]byte)
	var p *Prepared
	if pc, ok := ctx.(PreparedContext); ok {
		p = pc.Prepared()
	}
	if p == nil {
		p = t.Prepare(Record{Topic: string(ctx.Topic()), Partition: ctx.Partition(), Offset: ctx.Offset(),
			Timestamp: ctx.Timestamp(), Key: ctx.Key(), Headers: ctx.Headers(), Value: raw})
	}
	if p.reason != "" {
		t.deadLetter(ctx, raw, p.reason, p.err)
		return
	}
	table := tableOf(ctx, p.key)
	if !p.fromLoop && p.key != ctx.Key() {
		switch {
		case t.Rekey == RekeyNever:
			if table.keyed == nil {
				ctx.Fail(errors.New("rekey=never needs a runtime that reads the table by key (the exactly-once runtime)"))
			}
		default:
			lt, ok := loopTable(ctx, p.key)
			if !ok {
				loopback(ctx, p.key, raw, loopHeaders(p.recKey, p.headers, p.pos))
				t.Observer.Rekeyed()
				return
			}
			table.keyed = lt
		}
	}
	t.dedup(ctx, table, &Input{Event: p.event, Key: p.recKey, Headers: p.headers, Position: p.pos}, raw)
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

func emit(ctx goka.Context, topic goka.Stream, key string, value any, h goka.Headers) {
	if e, ok := ctx.(HeaderEmitter); ok {
		e.EmitWithHeaders(topic, key, value, h)
		return
	}
	ctx.Emit(topic, key, value, goka.WithCtxEmitHeaders(h))
}

func loopback(ctx goka.Context, key string, value any, h goka.Headers) {
	if e, ok := ctx.(HeaderEmitter); ok {
		e.LoopbackWithHeaders(key, value, h)
		return
	}
	ctx.Loopback(key, value, goka.WithCtxEmitHeaders(h))
}

func (t *Topology) dedup(ctx goka.Context, table tableRef, in *Input, raw []byte) {
	now := t.Now()
	var existing *codecs.SeenRecord
	if v := table.value(); v != nil {
		existing = v.(*codecs.SeenRecord)
	}
	p := in.Position.Partition
	switch t.Table.Judge(existing, EventTime(in.Event, in.Position), now) {
	case Duplicate:
		t.Observer.Skipped(p)
		return
	case Expired:
		t.Observer.Expired(p)
	case TooOld:
		t.Observer.TooOld(p)
		switch t.StaleEvents {
		case StaleSkip:
			return
		case StaleDeadLetter:
			t.deadLetter(ctx, raw, ReasonTooOld, fmt.Errorf("event time %v is older than the retention %v: the table cannot judge it",
				EventTime(in.Event, in.Position).UTC().Format(time.RFC3339), t.Table.Retention))
			return
		}
	}

	outs, err := t.handle(ctx.Context(), in)
	if err != nil {
		// Not marked: a re-drive from the dead-letter topic processes it.
		t.deadLetter(ctx, raw, ReasonHandlerError, err)
		return
	}
	for _, m := range outs {
		emit(ctx, goka.Stream(t.Output), m.Key, m.Value, m.Headers)
	}
	table.set(t.Table.Record(in.Event, in.Position, now))
	t.Observer.Processed(p, now.Sub(in.Position.Timestamp))
}

// handle runs the handler with bounded retries and exponential backoff.
func (t *Topology) handle(ctx context.Context, in *Input) ([]Message, error) {
	backoff := t.RetryBackoff
	for attempt := 0; ; attempt++ {
		outs, err := t.Handler.Handle(ctx, in)
		if err == nil {
			return outs, nil
		}
		t.Observer.HandlerError()
		if attempt >= t.HandlerRetries {
			return nil, fmt.Errorf("handler failed %d times, last: %w", attempt+1, err)
		}
		t.Logger.Warn("handler failed, retrying", "event", in.Event.EventID, "attempt", attempt+1, "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff *= 2
	}
}

func (t *Topology) deadLetter(ctx goka.Context, raw []byte, reason string, cause error) {
	h := make(goka.Headers, len(ctx.Headers())+6)
	for k, v := range ctx.Headers() {
		h[k] = v
	}
	h[HeaderDLQReason] = []byte(reason)
	h[HeaderDLQError] = []byte(cause.Error())
	h[HeaderDLQGroup] = []byte(t.Group)
	h[HeaderDLQTopic] = []byte(ctx.Topic())
	h[HeaderDLQPartition] = []byte(strconv.Itoa(int(ctx.Partition())))
	h[HeaderDLQOffset] = []byte(strconv.FormatInt(ctx.Offset(), 10))
	emit(ctx, goka.Stream(t.DLQ), ctx.Key(), raw, h)
	t.Observer.DeadLettered(reason)
	t.Logger.Warn("dead-lettered", "reason", reason, "topic", ctx.Topic(), "partition", ctx.Partition(), "offset", ctx.Offset(), "err", cause)
}

// loopHeaders carries the original position through the loop topic so the
// seen record and the handler see where the event really came from.
func loopHeaders(key string, headers map[string][]byte, pos Position) goka.Headers {
	h := make(goka.Headers, len(headers)+5)
	for k, v := range headers {
		h[k] = v
	}
	h[headerLoopSrcKey] = []byte(key)
	h[headerLoopSrcTopic] = []byte(pos.Topic)
	h[headerLoopSrcPart] = []byte(strconv.Itoa(int(pos.Partition)))
	h[headerLoopSrcOffset] = []byte(strconv.FormatInt(pos.Offset, 10))
	h[headerLoopSrcTimeRFC] = []byte(pos.Timestamp.UTC().Format(time.RFC3339Nano))
	return h
}

// loopSource reads loopHeaders back: the original position, key and headers.
func loopSource(headers map[string][]byte) (Position, string, map[string][]byte, error) {
	var pos Position
	part, err1 := strconv.ParseInt(string(headers[headerLoopSrcPart]), 10, 32)
	off, err2 := strconv.ParseInt(string(headers[headerLoopSrcOffset]), 10, 64)
	ts, err3 := time.Parse(time.RFC3339Nano, string(headers[headerLoopSrcTimeRFC]))
	if err := errors.Join(err1, err2, err3); err != nil {
		return pos, "", headers, fmt.Errorf("loop record without its source position: %w", err)
	}
	pos = Position{Topic: string(headers[headerLoopSrcTopic]), Partition: int32(part), Offset: off, Timestamp: ts}
	orig := make(map[string][]byte, len(headers))
	for k, v := range headers {
		switch k {
		case headerLoopSrcKey, headerLoopSrcTopic, headerLoopSrcPart, headerLoopSrcOffset, headerLoopSrcTimeRFC:
		default:
			orig[k] = v
		}
	}
	return pos, string(headers[headerLoopSrcKey]), orig, nil
}
