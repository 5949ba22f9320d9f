package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/lovoo/goka"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/codecs"
	"github.com/dedupkit/dedup/internal/wire"
)

// Graph builds the goka group graph: one input edge per input topic, all
// judged against the one group table. The input and loop codecs pass bytes
// through: decoding happens in the callback, where a bad record can be
// dead-lettered instead of stopping the processor. maxRecordBytes is the
// largest record goka's producer sends (0: unknown; see
// Runtime.MaxRecordBytes). processed, when set, is told each record the
// callback processed (not one it left for the partition's next owner), from
// the partition's goroutine: the best-effort runtime's consumer lag counts
// from it.
func Graph(t *dedup.Topology, maxRecordBytes int, processed func(topic string, partition int32, offset int64)) *goka.GroupGraph {
	process := func(ctx goka.Context, msg any) {
		if Process(t, maxRecordBytes, ctx, msg) && processed != nil {
			processed(string(ctx.Topic()), ctx.Partition(), ctx.Offset())
		}
	}
	var edges []goka.Edge
	for _, in := range t.Inputs {
		edges = append(edges, goka.Input(goka.Stream(in), wire.Bytes{}, process))
	}
	edges = append(edges,
		goka.Loop(wire.Bytes{}, process),
		goka.Persist(codecs.Seen{}),
		goka.Output(goka.Stream(t.DLQ), wire.Bytes{}),
	)
	for _, o := range t.Outputs {
		if o != t.DLQ {
			edges = append(edges, goka.Output(goka.Stream(o), wire.Bytes{}))
		}
	}
	return goka.DefineGroup(goka.Group(t.Group), edges...)
}

// Process is the goka callback: Prepare and ProcessRecord, with an error
// ending the callback as goka expects. It reports whether the record was
// processed: false when it was interrupted or failed.
func Process(t *dedup.Topology, maxRecordBytes int, ctx goka.Context, msg any) bool {
	if err := ctx.Context().Err(); err != nil {
		// goka may hand over the partition's next record after one was
		// interrupted; processing it would commit an offset past the
		// interrupted one, which would then never be processed.
		ctx.DeferCommit()(fmt.Errorf("%w: %w", dedup.ErrInterrupted, err))
		return false
	}
	raw, _ := msg.([]byte)
	p := Prepare(t, dedup.Record{Topic: string(ctx.Topic()), Partition: ctx.Partition(), Offset: ctx.Offset(),
		Timestamp: ctx.Timestamp(), Key: ctx.Key(), Headers: headersOf(ctx.Headers()), Value: raw})
	err := ProcessRecord(t, &gokaRuntime{ctx: ctx, maxRecord: maxRecordBytes}, p, raw)
	switch {
	case errors.Is(err, dedup.ErrInterrupted):
		// goka's Fail once its context is done (the interruption's usual
		// cause) only notes the error and commits the message all the
		// same; a deferred commit that fails does not commit it.
		ctx.DeferCommit()(err)
	case err != nil:
		ctx.Fail(err)
	}
	return err == nil
}

// gokaRuntime is the Runtime of a record under goka's processor. goka
// reads and writes the group table only under the record's own key, owns no
// loop partition in the record's transaction, and takes headers as a map,
// which loses their order and repeated keys.
type gokaRuntime struct {
	ctx       goka.Context
	maxRecord int
}

func (r *gokaRuntime) Context() context.Context { return r.ctx.Context() }
func (r *gokaRuntime) MaxRecordBytes() int      { return r.maxRecord }

// Table is the record's own table value, for key only when it is the
// record's key.
func (r *gokaRuntime) Table(key string) (Table, error) {
	if key != r.ctx.Key() {
		return nil, fmt.Errorf("goka's context reads the table only under the record's key %q, not %q", r.ctx.Key(), key)
	}
	return r, nil
}

// LoopTable is always false: goka's context cannot write another key.
func (r *gokaRuntime) LoopTable(string) (Table, bool) { return nil, false }

// Get is the record key's table value; Table let no other key through.
func (r *gokaRuntime) Get(string) (*codecs.SeenRecord, error) {
	v := r.ctx.Value()
	if v == nil {
		return nil, nil
	}
	rec, ok := v.(*codecs.SeenRecord)
	if !ok {
		return nil, fmt.Errorf("table value of %q is a %T, not a *codecs.SeenRecord", r.ctx.Key(), v)
	}
	return rec, nil
}

// Set writes the record key's table value; Table let no other key through.
func (r *gokaRuntime) Set(_ string, rec *codecs.SeenRecord) error {
	r.ctx.SetValue(rec)
	return nil
}

// Forward is never asked for: Table never answers ErrTableElsewhere.
func (r *gokaRuntime) Forward(string, []byte, dedup.Headers) error {
	return errors.New("goka's runtime forwards no event: it holds the table of every partition it consumes")
}

// Emit and Loopback fail through goka's ctx.Fail, which ends the callback.
func (r *gokaRuntime) Emit(topic, key string, value []byte, h dedup.Headers) error {
	r.ctx.Emit(goka.Stream(topic), key, value, goka.WithCtxEmitHeaders(gokaHeaders(h)))
	return nil
}

func (r *gokaRuntime) Loopback(key string, value []byte, h dedup.Headers) error {
	r.ctx.Loopback(key, value, goka.WithCtxEmitHeaders(gokaHeaders(h)))
	return nil
}

// headersOf converts goka's header map (whose order is lost already).
func headersOf(m goka.Headers) dedup.Headers {
	if len(m) == 0 {
		return nil
	}
	h := make(dedup.Headers, 0, len(m))
	for k, v := range m {
		h = append(h, dedup.Header{Key: k, Value: v})
	}
	return h
}

// gokaHeaders converts to goka's header map: order and repeated keys are lost
// (the last value of a key wins).
func gokaHeaders(h dedup.Headers) goka.Headers {
	if len(h) == 0 {
		return nil
	}
	m := make(goka.Headers, len(h))
	for _, x := range h {
		m[x.Key] = x.Value
	}
	return m
}
