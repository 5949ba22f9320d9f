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
// through Prepare, to its end on the calling goroutine: StartRecord, and
// the handler's call (Call.Run, Call.Finish) when it needs one.
//
// A non-nil error means the runtime must not commit what this record wrote:
// dedup.ErrInterrupted when the handler stopped because the runtime's
// context was cancelled; any other error is the runtime's (a table it cannot
// read, a record it cannot write, dedup.RekeyNever on a runtime that cannot
// read the table by key).
func ProcessRecord(t *dedup.Topology, rt Runtime, p *Prepared, raw []byte) error {
	var c Call
	if started, err := StartRecord(t, rt, p, raw, &c); err != nil || !started {
		return err
	}
	c.Run(rt.Context())
	return c.Finish(rt)
}

// StartRecord does all of one record's processing that needs no handler
// call. From the input topic it loops the event to its dedup key's
// partition when the record key is not the dedup key (the table is keyed by
// record key), unless the runtime owns that partition (Runtime.LoopTable)
// or the topology judges events where they arrived (dedup.RekeyNever).
// Then it judges. A first-seen event fills in c and returns true: the
// runtime runs the call (Call.Run, on any goroutine) and then finishes it
// (Call.Finish, where the runtime writes), which emits the outputs and
// marks the key seen. false: the record is done (a duplicate, looped,
// dead-lettered, skipped). Errors are ProcessRecord's. c is the caller's,
// so that a runtime can keep it with its own state in one allocation.
func StartRecord(t *dedup.Topology, rt Runtime, p *Prepared, raw []byte, c *Call) (bool, error) {
	if p.reason != "" {
		return false, deadLetter(t, rt, p, raw, p.reason, p.err)
	}
	rekeyed := !p.fromLoop && p.key != p.recKey
	if rekeyed && t.Rekey != dedup.RekeyNever {
		if table, ok := rt.LoopTable(p.key); ok {
			return judge(t, rt, table, p, raw, c)
		}
		return false, loop(t, rt, p, raw, false)
	}
	table, err := rt.Table(p.key)
	switch {
	case errors.Is(err, ErrTableElsewhere) && !p.fromLoop && t.Rekey != dedup.RekeyNever:
		return false, loop(t, rt, p, raw, true)
	case err != nil && rekeyed:
		return false, fmt.Errorf("rekey=never needs a runtime that reads the table by key (the exactly-once runtime): %w", err)
	case err != nil:
		return false, err
	case rekeyed && p.recKey == "":
		// Copies of one event are judged together only when they share a
		// record key; a keyless record lands on any partition, so judging
		// it there could let a duplicate by.
		return false, deadLetter(t, rt, p, raw, dedup.ReasonNoRecordKey, errors.New("record has no key, and with rekey=never an event is "+
			"judged in its record key's partition: key the records (by aggregate or event ID) or use rekey=always"))
	}
	return judge(t, rt, table, p, raw, c)
}

// Keys are the keys whose events must run one after the other: the dedup
// key of a prepared record, and its record key when the topology orders by
// it ("" when not). A runtime that runs several calls at once holds a
// record back while a call of either key runs. A record that StartRecord
// loops elsewhere is judged under the same dedup key where it arrives.
func Keys(t *dedup.Topology, p *Prepared) (dedupKey, recordKey string) {
	if t.OrderByRecordKey {
		return p.key, p.recKey
	}
	return p.key, ""
}

// loop sends the event to the loop topic under its dedup key, with its
// source in headers: to its key's partition (Runtime.Loopback), or, to
// forward it, to its own partition's (Runtime.Forward). A loop record too
// large to write dead-letters the event instead.
func loop(t *dedup.Topology, rt Runtime, p *Prepared, raw []byte, forward bool) error {
	h := loopHeaders(p.recKey, p.headers, p.pos)
	if limit := rt.MaxRecordBytes(); limit > 0 && RecordSize(p.key, raw, h) > limit {
		return deadLetter(t, rt, p, raw, dedup.ReasonTooLarge, fmt.Errorf("the loop record to re-key it is %d bytes, more than the %d bytes a record may have",
			RecordSize(p.key, raw, h), limit))
	}
	if forward {
		return rt.Forward(p.key, raw, h)
	}
	if err := rt.Loopback(p.key, raw, h); err != nil {
		return err
	}
	onRekeyed(t)
	return nil
}

func judge(t *dedup.Topology, rt Runtime, table Table, p *Prepared, raw []byte, c *Call) (bool, error) {
	now := now(t)
	existing, err := table.Get(p.key)
	if err != nil {
		return false, err
	}
	part := p.pos.Partition
	switch verdictOf(t, existing, eventTime(p.event, p.pos), now) {
	case duplicate:
		onSkipped(t, part)
		return false, nil
	case expired:
		onExpired(t, part)
	case tooOld:
		onTooOld(t, part)
		switch t.StaleEvents {
		case dedup.StaleSkip:
			return false, nil
		case dedup.StaleDeadLetter:
			return false, deadLetter(t, rt, p, raw, dedup.ReasonTooOld, fmt.Errorf("event time %v is older than the retention %v: the table cannot judge it",
				eventTime(p.event, p.pos).UTC().Format(time.RFC3339), t.Retention))
		}
	}
	ev := &dedup.Event{Position: p.pos, Key: p.recKey, Headers: p.headers, Value: p.event.Raw,
		EventID: p.event.EventID, AggregateID: p.event.AggregateID,
		Type: p.event.Type, OccurredAt: p.event.OccurredAt, Payload: p.event.Payload}
	*c = Call{t: t, table: table, p: p, raw: raw, ev: ev, now: now}
	return true, nil
}

// Call is the handler's call for one first-seen event, between StartRecord
// and Finish. Run may run on any goroutine; the runtime's writes (Finish)
// stay on the runtime's.
type Call struct {
	t     *dedup.Topology
	table Table
	p     *Prepared
	raw   []byte
	ev    *dedup.Event
	now   time.Time // the judgement's, also the seen mark's

	outs   []dedup.Message
	reason string
	err    error
}

// Run calls the handler with its retries under ctx.
func (c *Call) Run(ctx context.Context) { c.outs, c.reason, c.err = handle(c.t, ctx, c.ev) }

// Interrupted says Run stopped because its ctx ended: Finish returns
// dedup.ErrInterrupted, and nothing of the event may be kept.
func (c *Call) Interrupted() bool { return errors.Is(c.err, dedup.ErrInterrupted) }

// Err is why Run stopped, when Interrupted.
func (c *Call) Err() error { return c.err }

// Finish writes what Run returned through rt: the outputs and the seen
// mark, or a dead letter.
func (c *Call) Finish(rt Runtime) error {
	t, p := c.t, c.p
	outs, reason, err := c.outs, c.reason, c.err
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
		return deadLetter(t, rt, p, c.raw, reason, err)
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
	if err := c.table.Set(p.key, seenRecord(t, p.event, p.pos, c.now)); err != nil {
		return err
	}
	onProcessed(t, p.pos.Partition, c.now.Sub(p.pos.Timestamp))
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
		if errors.Is(err, dedup.ErrInterrupted) {
			// The handler asks for the transaction to abort: a resource
			// joined to it cannot commit (dedup.Resource).
			return nil, "", fmt.Errorf("event %s: %w", ev.EventID, err)
		}
		onHandlerError(t)
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

// call runs the handler once under its timeout, turning a panic into an
// error. A call that outlives Topology.HandlerTimeout fails like any other
// attempt: its ctx says DeadlineExceeded while ctx itself goes on.
func call(t *dedup.Topology, ctx context.Context, ev *dedup.Event) (outs []dedup.Message, err error) {
	ctx, cancel := context.WithTimeoutCause(ctx, t.CallTimeout(), errCallTimeout)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			outs, err = nil, &panicError{value: r, stack: debug.Stack()}
		}
		if err != nil && context.Cause(ctx) == errCallTimeout {
			err = fmt.Errorf("handler call ran past the handler timeout %v: %w", t.CallTimeout(), err)
		}
	}()
	return t.Handler.Handle(ctx, ev)
}

// errCallTimeout is the cause of a call's ctx that ran past the timeout.
var errCallTimeout = errors.New("handler timeout")

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
	onDeadLettered(t, reason)
	logger(t).Warn("dead-lettered", "reason", reason, "topic", pos.Topic, "partition", pos.Partition, "offset", pos.Offset, "err", cause)
	return nil
}

// panicError is a recovered handler panic.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.value) }

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
