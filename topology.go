package dedup

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/lovoo/goka"
)

// Dead-letter headers. The reason is a short label (DeadLetterReasons lists
// them); the error is the full message; the source headers say where the
// record was read from the input, also for events that went through the
// loop topic.
const (
	HeaderDLQReason    = "dlq-reason"
	HeaderDLQError     = "dlq-error"
	HeaderDLQGroup     = "dlq-group"
	HeaderDLQTopic     = "dlq-source-topic"
	HeaderDLQPartition = "dlq-source-partition"
	HeaderDLQOffset    = "dlq-source-offset"

	// Reasons that are not decode errors.
	ReasonHandlerError     = "handler-error"
	ReasonHandlerPermanent = "handler-permanent"
	ReasonHandlerPanic     = "handler-panic"
	ReasonBadOutput        = "bad-output"
	ReasonTooOld           = "too-old"
	ReasonNoAggregateID    = "no-aggregate-id"
	ReasonBadLoopRecord    = "bad-loop-record"
	ReasonNoRecordKey      = "no-record-key"
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
	// needs anyway), the producers of every input partition records alike
	// (the same key to the same partition number: the default partitioner
	// on topics of one partition count does), and that count does not
	// change; it saves the loop's second produce, consume and decode of
	// every event.
	// Needs a runtime that reads the table by any key, the exactly-once
	// one: goka's context reads it only under the record's own key.
	RekeyNever RekeyPolicy = "never"
)

// Defaults shared by the library (Define) and the worker binary's flags.
const (
	// DefaultHandlerRetries is how often a failing handler is retried.
	DefaultHandlerRetries = 3
	// DefaultRetryBackoff is the first pause before a retry, doubled each time.
	DefaultRetryBackoff = 100 * time.Millisecond
	// DefaultHandlerTimeout bounds one handler call: a payment API or a
	// database that does not answer in a minute is failing, and a call
	// without a bound would hold its event, and every event of its key,
	// for ever.
	DefaultHandlerTimeout = time.Minute
)

// Topology is the goka graph of one consumer group: the input topics, the
// dedup table (goka group table "<group>-table", codec codecs.Seen), the
// output topics, a dead-letter topic and a loop topic "<group>-loop" for
// re-keying. Package processor runs it exactly once; package deduptest runs
// it in memory for tests.
//
// Build one with Define, which fills in the defaults and validates. A
// runtime reads a Topology and never writes it, so one Topology may be run
// by several runtimes (and tests) at once.
type Topology struct {
	Group string
	// Inputs are the topics the group reads. They share one table, so an
	// event ID that arrives on two of them (a topic and its retry topic,
	// two regions' topics) is processed once. The table and loop topics are
	// co-partitioned with every input, so all inputs must have the same
	// partition count; the runtimes refuse to start otherwise.
	Inputs  []string
	Outputs []string // the topics a handler may write (see Message.Topic)
	DLQ     string

	// KeyType is what makes two events the same (KeyEventID or
	// KeyAggregateID); Retention is how long a seen ID is remembered.
	KeyType   KeyType
	Retention time.Duration
	// EventID is where the event ID of a record is found.
	EventID IDSource
	Handler Handler

	// HandlerRetries is how many times a failing handler is retried before the
	// event is dead-lettered; RetryBackoff is the first pause, doubled each time.
	HandlerRetries int
	RetryBackoff   time.Duration
	// HandlerTimeout bounds one handler call (0: DefaultHandlerTimeout):
	// past it the call's ctx is cancelled and the call counts as a failed
	// attempt, retried and then dead-lettered like any other error.
	HandlerTimeout time.Duration

	// Concurrency is how many handler calls a member of the exactly-once
	// runtime runs at once (0 or 1: one at a time). Events with the same
	// dedup key always run one after the other in offset order, and so do
	// events with the same record key under OrderByRecordKey; the others
	// run side by side. A partition's input offset is committed only up to
	// its oldest event not yet done; an event done past it is committed
	// with its seen mark, so after a crash it is skipped, not run again.
	Concurrency int
	// OrderByRecordKey runs the events of one record key one at a time,
	// in offset order, under Concurrency: what an aggregate's events need
	// when their handler must see them in order.
	OrderByRecordKey bool

	// StaleEvents is what happens to an unseen event older than the
	// retention, which the table cannot judge: process it (default), skip it
	// or dead-letter it. It is counted either way.
	StaleEvents StalePolicy

	// Rekey is RekeyAlways (default, also for "") or RekeyNever.
	Rekey RekeyPolicy

	Hooks  []Hook           // told the topology's outcomes; see Hook
	Logger *slog.Logger     // nil: slog.Default()
	Now    func() time.Time // nil: time.Now
}

// Validate reports a topology that cannot run.
func (t *Topology) Validate() error {
	var errs []error
	if t.Group == "" {
		errs = append(errs, errors.New("group is empty"))
	}
	internal := []string{t.TableTopic(), t.LoopTopic()}
	errs = append(errs, t.validateInputs(internal)...)
	if len(t.Outputs) == 0 {
		errs = append(errs, errors.New("no output topic"))
	}
	if t.DLQ == "" {
		errs = append(errs, errors.New("dead-letter topic is empty"))
	}
	for _, o := range t.Outputs {
		switch {
		case o == "":
			errs = append(errs, errors.New("an output topic is empty"))
		case slices.Contains(t.Inputs, o):
			errs = append(errs, fmt.Errorf("input topic %q is also an output: events would loop forever", o))
		case slices.Contains(internal, o):
			errs = append(errs, fmt.Errorf("output %q is the group's own table or loop topic", o))
		}
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
	if t.RetryBackoff < 0 {
		errs = append(errs, errors.New("retry backoff is negative"))
	}
	if t.HandlerTimeout < 0 {
		errs = append(errs, errors.New("handler timeout is negative"))
	}
	if t.Concurrency < 0 {
		errs = append(errs, errors.New("concurrency is negative"))
	}
	switch t.KeyType {
	case KeyEventID, KeyAggregateID:
	default:
		errs = append(errs, fmt.Errorf("key type %q: want %q or %q", t.KeyType, KeyEventID, KeyAggregateID))
	}
	if t.Retention <= 0 {
		errs = append(errs, fmt.Errorf("retention %v: must be positive", t.Retention))
	}
	if err := t.EventID.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// validateInputs reports inputs that are missing, empty, named twice, or
// that the group writes itself: an input that is also the dead-letter,
// table or loop topic would read the group's own records as events.
func (t *Topology) validateInputs(internal []string) []error {
	if len(t.Inputs) == 0 {
		return []error{errors.New("no input topic")}
	}
	var errs []error
	for i, in := range t.Inputs {
		switch {
		case in == "":
			errs = append(errs, errors.New("an input topic is empty"))
		case slices.Contains(t.Inputs[:i], in):
			errs = append(errs, fmt.Errorf("input topic %q is named twice", in))
		case in == t.DLQ:
			errs = append(errs, fmt.Errorf("input topic %q is also the dead-letter topic: events would loop forever", in))
		case slices.Contains(internal, in):
			errs = append(errs, fmt.Errorf("input topic %q is the group's own table or loop topic", in))
		}
	}
	return errs
}

// CallTimeout is HandlerTimeout with its default.
func (t *Topology) CallTimeout() time.Duration {
	if t.HandlerTimeout == 0 {
		return DefaultHandlerTimeout
	}
	return t.HandlerTimeout
}

// Calls is Concurrency with its default: at least one.
func (t *Topology) Calls() int { return max(1, t.Concurrency) }

// TableTopic is the changelog topic of the dedup table.
func (t *Topology) TableTopic() string { return string(goka.GroupTable(goka.Group(t.Group))) }

// LoopTopic is the re-keying topic.
func (t *Topology) LoopTopic() string { return t.Group + "-loop" }
