package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dedupkit/dedup"
)

// ProcessRecord processes one consumed record, which the runtime ran
// through Prepare. From the input topic it loops the event to its dedup
// key's partition when the record key is not the dedup key (the table is
// keyed by record key), unless the runtime owns that partition
// (Runtime.LoopTable) or the topology judges events where they arrived
// (dedup.RekeyNever). Then it judges, runs the handler, emits the outputs
// and marks the key seen.
//
// A non-nil error means the runtime must not commit what this record wrote:
// dedup.ErrInterrupted when the handler stopped because the runtime's
// context was cancelled; any other error is the runtime's (a table it cannot
// read, a record it cannot write, dedup.RekeyNever on a runtime that cannot
// read the table by key).
func ProcessRecord(t *dedup.Topology, rt Runtime, p *Prepared, raw []byte) error {
	if p.reason != "" {
		return deadLetter(t, rt, p, raw, p.reason, p.err)
	}
	rekeyed := !p.fromLoop && p.key != p.recKey
	if rekeyed && t.Rekey != dedup.RekeyNever {
		if table, ok := rt.LoopTable(p.key); ok {
			return judge(t, rt, table, p, raw)
		}
		return loop(t, rt, p, raw, false)
	}
	table, err := rt.Table(p.key)
	switch {
	case errors.Is(err, ErrTableElsewhere) && !p.fromLoop && t.Rekey != dedup.RekeyNever:
		return loop(t, rt, p, raw, true)
	case err != nil && rekeyed:
		return fmt.Errorf("rekey=never needs a runtime that reads the table by key (the exactly-once runtime): %w", err)
	case err != nil:
		return err
	case rekeyed && p.recKey == "":
		// Copies of one event are judged together only when they share a
		// record key; a keyless record lands on any partition, so judging
		// it there could let a duplicate by.
		return deadLetter(t, rt, p, raw, dedup.ReasonNoRecordKey, errors.New("record has no key, and with rekey=never an event is "+
			"judged in its record key's partition: key the records (by aggregate or event ID) or use rekey=always"))
	}
	return judge(t, rt, table, p, raw)
}

// loop sends the event to the loop topic under its dedup key, with its
// source in headers: to its key's partition (Runtime.Loopback), or, to
// forward it, to its own partition's (Runtime.Forward). A loop record too
// large to write dead-letters the event instead.
func loop(t *dedup.Topology, rt Runtime, p *Prepared, raw []byte, forward bool) error {
	h := loopHeaders(p.recKey, p.headers, p.pos)
	if limit := rt.MaxRecordBytes(); limit > 0 && dedup.RecordSize(p.key, raw, h) > limit {
		return deadLetter(t, rt, p, raw, dedup.ReasonTooLarge, fmt.Errorf("the loop record to re-key it is %d bytes, more than the %d bytes a record may have",
			dedup.RecordSize(p.key, raw, h), limit))
	}
	if forward {
		return rt.Forward(p.key, raw, h)
	}
	if err := rt.Loopback(p.key, raw, h); err != nil {
		return err
	}
	observer(t).Rekeyed()
	return nil
}

func judge(t *dedup.Topology, rt Runtime, table Table, p *Prepared, raw []byte) error {
	now := now(t)
	existing, err := table.Get(p.key)
	if err != nil {
		return err
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
			return deadLetter(t, rt, p, raw, dedup.ReasonTooOld, fmt.Errorf("event time %v is older than the retention %v: the table cannot judge it",
				dedup.EventTime(p.event, p.pos).UTC().Format(time.RFC3339), t.Table.Retention))
		}
	}

	ev := &dedup.Event{Position: p.pos, Key: p.recKey, Headers: p.headers, Value: p.event.Raw,
		EventID: p.event.EventID, AggregateID: p.event.AggregateID, Envelope: p.event}
	outs, reason, err := handle(t, rt.Context(), ev)
	if errors.Is(err, dedup.ErrInterrupted) {
		return err
	}
	if err == nil {
		if err = checkOutputs(t, outs); err != nil {
			reason = dedup.ReasonBadOutput
		} else if err = checkSizes(outs, t.Outputs, rt.MaxRecordBytes()); err != nil {
			reason = dedup.ReasonTooLarge
		}
	}
	if err != nil {
		// Not marked: a re-drive from the dead-letter topic processes it.
		return deadLetter(t, rt, p, raw, reason, err)
	}
	for _, m := range outs {
		topic := m.Topic
		if topic == "" {
			topic = t.Outputs[0]
		}
		if err := rt.Emit(topic, m.Key, m.Value, m.Headers); err != nil {
			return err
		}
	}
	if err := table.Set(p.key, t.Table.Record(p.event, p.pos, now)); err != nil {
		return err
	}
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
// headers (a loop record without them keeps its own headers, see Prepared).
func deadLetter(t *dedup.Topology, rt Runtime, p *Prepared, raw []byte, reason string, cause error) error {
	pos, key := p.pos, p.recKey
	h := make(dedup.Headers, 0, len(p.headers)+6)
	h = append(h, p.headers...)
	h = append(h,
		dedup.Header{Key: dedup.HeaderDLQReason, Value: []byte(reason)},
		dedup.Header{Key: dedup.HeaderDLQError, Value: []byte(cause.Error())},
		dedup.Header{Key: dedup.HeaderDLQGroup, Value: []byte(t.Group)},
		dedup.Header{Key: dedup.HeaderDLQTopic, Value: []byte(pos.Topic)},
		dedup.Header{Key: dedup.HeaderDLQPartition, Value: []byte(strconv.Itoa(int(pos.Partition)))},
		dedup.Header{Key: dedup.HeaderDLQOffset, Value: []byte(strconv.FormatInt(pos.Offset, 10))})
	value, h := fitDeadLetter(key, raw, h, rt.MaxRecordBytes())
	if err := rt.Emit(t.DLQ, key, value, h); err != nil {
		return err
	}
	observer(t).DeadLettered(reason)
	logger(t).Warn("dead-lettered", "reason", reason, "topic", pos.Topic, "partition", pos.Partition, "offset", pos.Offset, "err", cause)
	return nil
}

// panicError is a recovered handler panic.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.value) }

func observer(t *dedup.Topology) dedup.Observer {
	if t.Observer == nil {
		return dedup.NopObserver{}
	}
	return t.Observer
}

func logger(t *dedup.Topology) *slog.Logger {
	if t.Logger == nil {
		return slog.Default()
	}
	return t.Logger
}

func now(t *dedup.Topology) time.Time {
	if t.Now == nil {
		return time.Now()
	}
	return t.Now()
}

// isLoop is topic == LoopTopic() without building the name for every record.
func isLoop(t *dedup.Topology, topic string) bool {
	return len(topic) == len(t.Group)+len("-loop") && strings.HasPrefix(topic, t.Group) && strings.HasSuffix(topic, "-loop")
}
