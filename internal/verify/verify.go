// Package verify checks a deduplicating processor's work after the fact: it
// reads the input, output and dead-letter topics read_committed and reports
// every input event that was not output exactly once. It is the oracle of the
// exactly-once tests and the tool behind `processor verify`, so "no
// duplicates, nothing lost" can be checked on a real cluster.
//
// It assumes a handler that writes one output per event carrying the event's
// ID (the forward handler; the settlements example for OrderPaid events).
// With the worker's aggregate-id keys (Config.KeyType) it judges aggregates
// instead: every aggregate on the inputs must be output once.
// Run it once the processor has caught up: the topics are judged as they were
// when Run started.
package verify

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/engine"
	"github.com/dedupkit/dedup/internal/kafkautil"
	"github.com/dedupkit/dedup/internal/wire"
	"github.com/dedupkit/dedup/processor"
)

// MaxTraces bounds the traces of each kind a Report lists (its counts are
// exact): a run that output nothing would otherwise hold one per event.
const MaxTraces = 1000

// Config says what to verify. Inputs, IDSource and KeyType must be the
// processor's, so that the verifier computes the same dedup keys.
type Config struct {
	Brokers  []string
	Security processor.Security
	// Inputs are the topics the worker read (`processor run --input`): an
	// event on two of them is one event, output once.
	Inputs      []string
	Output, DLQ string // DLQ is optional
	IDSource    wire.IDSource
	// KeyType is the worker's dedup key (`processor run --key-type`); empty
	// is dedup.KeyEventID. With dedup.KeyAggregateID the worker processes an
	// aggregate's first event and skips the aggregate's later ones within its
	// --retention, so the verifier counts aggregates: each must be output
	// once over everything it reads, so the topics should hold less than one
	// retention of events.
	KeyType dedup.KeyType
}

// Validate reports every unusable field, named by its `processor verify`
// flag, so the command prints it as it is.
func (c Config) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	if len(c.Brokers) == 0 {
		bad("brokers", "required, e.g. 127.0.0.1:9092")
	}
	for _, b := range c.Brokers {
		if !strings.Contains(b, ":") {
			bad("brokers", "%q has no port, want host:port", b)
		}
	}
	if len(c.Inputs) == 0 {
		bad("input", "required")
	}
	if slices.Contains(c.Inputs, "") {
		bad("input", "%q names an empty topic", strings.Join(c.Inputs, ","))
	}
	for i, in := range c.Inputs {
		switch {
		case in == "":
		case slices.Contains(c.Inputs[:i], in):
			bad("input", "%q is named twice", in)
		case in == c.Output || in == c.DLQ:
			bad("input", "%q is also the output or dead-letter topic", in)
		}
	}
	if c.Output == "" {
		bad("output", "required")
	}
	if c.DLQ != "" && c.DLQ == c.Output {
		bad("dlq", "%q is also the output topic", c.DLQ)
	}
	if kt := c.KeyType; kt != "" && kt != dedup.KeyEventID && kt != dedup.KeyAggregateID {
		bad("key-type", "%q is not event-id or aggregate-id", kt)
	}
	if c.IDSource.Validate() != nil {
		bad("id-field", "empty; set it or --id-header")
	}
	if err := c.Security.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Role says which topic a record was read from.
type Role int

// The topics Run reads.
const (
	InputTopic Role = iota
	OutputTopic
	DeadLetterTopic
)

// Run reads every partition of the topics concurrently, from the log start
// to the last stable offset it had when Run started, and tallies them.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sc := sarama.NewConfig()
	sc.Version = kafkautil.SaramaVersion
	sc.ClientID = "dedup-verify"
	sc.Metadata.AllowAutoTopicCreation = false // a mistyped topic must fail, not appear
	if err := cfg.Security.Apply(sc); err != nil {
		return nil, err
	}
	client, err := sarama.NewClient(cfg.Brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("connect to %v: %w", cfg.Brokers, err)
	}
	defer client.Close()

	type span struct {
		role     Role
		topic    string
		part     int32
		from, to int64
	}
	// Every bound is fixed before the first read, so the report describes one
	// moment. Input first: with a worker still running, an event arriving in
	// between can then only add an unexpected output, never a false missing.
	var spans []span
	roles := make([]Role, len(cfg.Inputs), len(cfg.Inputs)+2)
	topics := append(slices.Clone(cfg.Inputs), cfg.Output, cfg.DLQ)
	roles = append(roles, OutputTopic, DeadLetterTopic) // InputTopic is 0
	for i, topic := range topics {
		role := roles[i]
		if topic == "" {
			continue
		}
		parts, err := client.Partitions(topic)
		if err != nil {
			return nil, fmt.Errorf("partitions of %q: %w", topic, err)
		}
		for _, p := range parts {
			from, to, err := kafkautil.Bounds(client, topic, p)
			if err != nil {
				return nil, fmt.Errorf("bounds: %w", err)
			}
			spans = append(spans, span{role, topic, p, from, to})
		}
	}

	tally, dec := NewTally(), wire.Decoder{ID: cfg.IDSource}
	table := cmp.Or(cfg.KeyType, dedup.KeyEventID)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for _, s := range spans {
		wg.Go(func() {
			_, err := kafkautil.ReadCommitted(ctx, client, s.topic, s.part, s.from, s.to,
				func(off int64, rec *sarama.Record) error {
					r := DecodeKey(dec, table, s.part, off, rec.Value, rec.Headers)
					r.Topic = s.topic
					tally.Add(s.role, r)
					return nil
				})
			if err != nil {
				cancel(fmt.Errorf("read %s/%d: %w", s.topic, s.part, err))
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	r := tally.Report()
	r.Inputs, r.Output, r.DLQ, r.KeyType = cfg.Inputs, cfg.Output, cfg.DLQ, table
	return r, nil
}

// Record is one committed record reduced to what the tally needs: where it
// is and its dedup key, or why it has none. Values are not kept, so a
// million events fit in memory.
type Record struct {
	Topic     string // set by Run; the topic's role is Add's
	Partition int32
	Offset    int64
	Key       string // dedup key (engine.DedupKey); empty when Err is set
	Err       error  // the decode error
	DLQReason string // the dlq-reason header, if any
}

// Decode reduces a record the way the processor sees it in event-id mode:
// DecodeKey with dedup.KeyEventID.
func Decode(d wire.Decoder, partition int32, offset int64, value []byte, headers []*sarama.RecordHeader) Record {
	return DecodeKey(d, dedup.KeyEventID, partition, offset, value, headers)
}

// DecodeKey reduces a record the way the processor sees it: same decoder,
// same key (engine.DedupKey), so an ID the processor would dedup is the ID the
// verifier counts. An event without an aggregate ID in aggregate-id mode
// has dedup.ErrNoAggregateID, which the worker dead-letters.
func DecodeKey(d wire.Decoder, kt dedup.KeyType, partition int32, offset int64, value []byte, headers []*sarama.RecordHeader) Record {
	r := Record{Partition: partition, Offset: offset}
	var hm map[string][]byte // only header mode reads headers; skip the map otherwise
	if d.ID.Header != "" {
		hm = make(map[string][]byte, len(headers))
	}
	for _, h := range headers {
		if string(h.Key) == dedup.HeaderDLQReason {
			r.DLQReason = string(h.Value)
		}
		if hm != nil {
			hm[string(h.Key)] = h.Value
		}
	}
	ev, err := d.Decode(value, hm)
	if err == nil {
		r.Key, err = engine.DedupKey(kt, ev)
	}
	r.Err = err
	return r
}

// entry is what is kept per dedup key: counts and the first two positions
// on the input and the output (their topics as indexes into Tally.topics),
// laid out to stay at 64 bytes.
type entry struct {
	inOff, outOff     [2]int64
	inPart, outPart   [2]int32
	in, out, dlq      int32
	inTopic, outTopic [2]uint8
}

// Tally counts records as they are read; Add is safe for concurrent use.
type Tally struct {
	mu     sync.Mutex
	events map[string]entry
	topics []string // the topics of the positions kept, by their index in entry
	r      Report
}

// topic is name's index in t.topics, added if new; the caller holds t.mu.
// Past 256 topics the positions keep the last one's index: Run reads a
// handful of topics.
func (t *Tally) topic(name string) uint8 {
	if i := slices.Index(t.topics, name); i >= 0 {
		return uint8(i)
	}
	if len(t.topics) == 256 {
		return 255
	}
	t.topics = append(t.topics, name)
	return uint8(len(t.topics) - 1)
}

// NewTally returns an empty tally.
func NewTally() *Tally {
	return &Tally{events: map[string]entry{}, r: Report{
		Undecodable: map[string]int{}, UndecodableOutput: map[string]int{}, DeadLettered: map[string]int{}}}
}

// Add counts one record read from the topic of role.
func (t *Tally) Add(role Role, rec Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch role {
	case InputTopic:
		t.r.InputRecords++
		if rec.Err != nil {
			t.r.Undecodable[reason(rec.Err)]++
			return
		}
	case OutputTopic:
		t.r.OutputRecords++
		if rec.Err != nil {
			t.r.UndecodableOutput[reason(rec.Err)]++
			return
		}
	case DeadLetterTopic:
		t.r.DeadLetterRecords++
		t.r.DeadLettered[cmp.Or(rec.DLQReason, "(no dlq-reason)")]++
		if rec.Err != nil { // an undecodable input record, counted above by reason
			return
		}
	}
	e := t.events[rec.Key]
	switch role {
	case InputTopic:
		if e.in > 0 {
			t.r.InputDuplicates++
		} else {
			t.r.InputEvents++
		}
		if e.in < 2 {
			e.inPart[e.in], e.inOff[e.in], e.inTopic[e.in] = rec.Partition, rec.Offset, t.topic(rec.Topic)
		}
		e.in++
	case OutputTopic:
		if e.out < 2 {
			e.outPart[e.out], e.outOff[e.out], e.outTopic[e.out] = rec.Partition, rec.Offset, t.topic(rec.Topic)
		}
		e.out++
	default:
		e.dlq++
	}
	t.events[rec.Key] = e
}

// Report classifies every key; call it once all records are added.
func (t *Tally) Report() *Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.r
	var missing, dup, unexp earliest
	for k, e := range t.events {
		if e.out > 0 {
			r.OutputEvents++
		}
		switch {
		case e.in > 0 && e.out == 0 && e.dlq > 0:
			r.DeadLetteredEvents++
		case e.in > 0 && e.out == 0:
			r.MissingEvents++
			missing.add(t.trace(k, e))
		case e.in == 0 && e.out > 0:
			r.UnexpectedEvents++
			r.UnexpectedOutputs += int(e.out)
			unexp.add(t.trace(k, e))
		}
		if e.out > 1 {
			r.DuplicatedEvents++
			r.ExtraOutputs += int(e.out) - 1
			dup.add(t.trace(k, e))
		}
	}
	r.Missing, r.Duplicated, r.Unexpected = missing.trim(), dup.trim(), unexp.trim()
	return &r
}

// Build tallies decoded records into a Report: Run's counting without Kafka.
func Build(input, output, deadLetter []Record) *Report {
	t := NewTally()
	for role, recs := range [][]Record{input, output, deadLetter} {
		for _, r := range recs {
			t.Add(Role(role), r)
		}
	}
	return t.Report()
}

// earliest keeps the MaxTraces traces with the lowest first position,
// trimming whenever it doubles, so a million missing events are never all
// held or sorted at once.
type earliest []Trace

func (l *earliest) add(t Trace) {
	if *l = append(*l, t); len(*l) >= 2*MaxTraces {
		l.trim()
	}
}

func (l *earliest) trim() []Trace {
	slices.SortFunc(*l, func(a, b Trace) int {
		pa, pb := a.first(), b.first()
		return cmp.Or(cmp.Compare(pa.Partition, pb.Partition), cmp.Compare(pa.Offset, pb.Offset),
			strings.Compare(pa.Topic, pb.Topic), strings.Compare(a.Source, b.Source), strings.Compare(a.ID, b.ID))
	})
	*l = (*l)[:min(len(*l), MaxTraces)]
	return *l
}

// reason is the label a record that has no dedup key is counted under: the
// worker's dead-letter reason.
func reason(err error) string {
	if errors.Is(err, dedup.ErrNoAggregateID) {
		return dedup.ReasonNoAggregateID
	}
	return wire.Reason(err)
}

func (t *Tally) trace(key string, e entry) Trace {
	tr := Trace{ID: key, InputCount: int(e.in), OutputCount: int(e.out)}
	if src, id, ok := strings.Cut(key, "\x00"); ok { // header mode: ce_source NUL ce_id
		tr.Source, tr.ID = src, id
	}
	for j := range min(int(e.in), 2) {
		tr.Inputs = append(tr.Inputs, Position{t.topics[e.inTopic[j]], e.inPart[j], e.inOff[j]})
	}
	for j := range min(int(e.out), 2) {
		tr.Outputs = append(tr.Outputs, Position{t.topics[e.outTopic[j]], e.outPart[j], e.outOff[j]})
	}
	return tr
}

// Position is a record's place: its topic (empty for records added without
// one), partition and offset.
type Position struct {
	Topic     string
	Partition int32
	Offset    int64
}

// String is p0@12, without the topic: Print adds it where the inputs are
// several.
func (p Position) String() string { return fmt.Sprintf("p%d@%d", p.Partition, p.Offset) }

// Trace locates one event (in aggregate-id mode, one aggregate) that failed
// the check, so it can be looked up in the topics and the processor's logs.
type Trace struct {
	ID, Source              string // the dedup key: the event ID, or the aggregate ID; Source is ce_source in header mode
	InputCount, OutputCount int
	Inputs, Outputs         []Position // the first two of each
}

// first orders traces: by first input position, else first output position.
func (t Trace) first() Position {
	if len(t.Inputs) > 0 {
		return t.Inputs[0]
	}
	return t.Outputs[0]
}

// Report is the verdict. Missing leaves out events that were dead-lettered
// and not output (a handler error does that by design); they are counted in
// DeadLetteredEvents. With KeyType dedup.KeyAggregateID every count of
// events counts aggregates.
type Report struct {
	Inputs      []string
	Output, DLQ string
	KeyType     dedup.KeyType // what an event is: dedup.KeyEventID, or dedup.KeyAggregateID

	InputRecords, InputEvents, InputDuplicates int
	Undecodable                                map[string]int // input records by wire.Reason
	OutputRecords, OutputEvents                int
	UndecodableOutput                          map[string]int
	DeadLetterRecords                          int
	DeadLettered                               map[string]int // by dlq-reason header
	DeadLetteredEvents                         int            // input events on the DLQ and not output

	MissingEvents                       int // input events with no output
	DuplicatedEvents, ExtraOutputs      int // events output more than once; their records beyond the first
	UnexpectedEvents, UnexpectedOutputs int // IDs (and their records) output but never on the input

	Missing, Duplicated, Unexpected []Trace // the earliest MaxTraces of each
}

// OK is true when every input event was output exactly once.
func (r *Report) OK() bool { return r.MissingEvents == 0 && r.DuplicatedEvents == 0 }

// Err says why the check failed, starting with FAIL; nil when OK.
func (r *Report) Err() error {
	if r.OK() {
		return nil
	}
	return fmt.Errorf("FAIL: missing %d (input %s with no output), duplicated %d (%s output more than once)",
		r.MissingEvents, r.unit(), r.DuplicatedEvents, r.unit())
}

// unit is what the report counts: events, or aggregates in aggregate-id
// mode.
func (r *Report) unit() string {
	if r.KeyType == dedup.KeyAggregateID {
		return "aggregates"
	}
	return "events"
}

// Print writes the counts, the first show traces of each kind, and a last
// line that starts with OK or FAIL.
func (r *Report) Print(w io.Writer, show int) {
	u := r.unit()
	fmt.Fprintf(w, "input       %s: %d records, %d distinct %s, %d duplicate records, undecodable %s\n",
		strings.Join(r.Inputs, ", "), r.InputRecords, r.InputEvents, u, r.InputDuplicates, byReason(r.Undecodable))
	fmt.Fprintf(w, "output      %s: %d records, %d distinct %s, undecodable %s\n",
		r.Output, r.OutputRecords, r.OutputEvents, u, byReason(r.UndecodableOutput))
	if r.DLQ != "" {
		fmt.Fprintf(w, "dead-letter %s: records %s; %d input %s dead-lettered instead of output\n",
			r.DLQ, byReason(r.DeadLettered), r.DeadLetteredEvents, u)
	}
	fmt.Fprintf(w, "missing:    %d input %s with no output\n", r.MissingEvents, u)
	fmt.Fprintf(w, "duplicated: %d %s output more than once (%d extra records)\n", r.DuplicatedEvents, u, r.ExtraOutputs)
	fmt.Fprintf(w, "unexpected: %d output records (%d IDs) not on the input\n", r.UnexpectedOutputs, r.UnexpectedEvents)
	for _, l := range []struct {
		name  string
		total int
		ts    []Trace
	}{{"missing", r.MissingEvents, r.Missing}, {"duplicated", r.DuplicatedEvents, r.Duplicated},
		{"unexpected", r.UnexpectedEvents, r.Unexpected}} {
		if n := min(show, len(l.ts)); n > 0 {
			fmt.Fprintf(w, "%s (first %d of %d):\n", l.name, n, l.total)
			for _, t := range l.ts[:n] {
				id := fmt.Sprintf("%q", t.ID)
				if t.Source != "" {
					id += fmt.Sprintf(" (source %q)", t.Source)
				}
				fmt.Fprintf(w, "  %s  input %s  output %s\n", id, positions(t.Inputs, t.InputCount, len(r.Inputs) > 1),
					positions(t.Outputs, t.OutputCount, false))
			}
		}
	}
	if err := r.Err(); err != nil {
		fmt.Fprintln(w, err)
		return
	}
	fmt.Fprintf(w, "OK: all %d input %s output exactly once\n", r.InputEvents, u)
}

// positions lists ps, of total, with their topics when withTopic (a
// position on one of several inputs).
func positions(ps []Position, total int, withTopic bool) string {
	s := make([]string, 0, len(ps)+1)
	for _, p := range ps {
		if withTopic {
			s = append(s, p.Topic+"/"+p.String())
		} else {
			s = append(s, p.String())
		}
	}
	if more := total - len(ps); more > 0 {
		s = append(s, fmt.Sprintf("+%d more", more))
	}
	return cmp.Or(strings.Join(s, " "), "none")
}

// byReason renders counts by reason, e.g. "3 (no-id 1, not-json 2)".
func byReason(m map[string]int) string {
	n, s := 0, []string{}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		n += m[k]
		s = append(s, fmt.Sprintf("%s %d", k, m[k]))
	}
	if n == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", n, strings.Join(s, ", "))
}
