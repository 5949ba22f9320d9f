// Package loadgen makes the benchmark's input: N records of JSON events keyed
// by aggregate ID, a share of them duplicates (half re-sent at once like a
// producer retry, half re-published much later with new offsets), and writes
// them to Kafka as fast as the broker takes them or at a fixed rate.
//
// Every record carries the header "bench-rec" with its position in the plan,
// so a watcher of the output can tell which input record (and so which
// distinct event) each output came from.
package loadgen

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// HeaderRecord names the header holding the record's index in the plan.
const HeaderRecord = "bench-rec"

// Spec describes the input.
type Spec struct {
	Records      int     // N, duplicates included
	DupRate      float64 // share of the N records that are duplicates (0.2)
	PayloadBytes int     // size of the event's "payload" JSON object (200)
	Seed         uint64  // the plan is a pure function of the spec
	RunID        string  // goes into event IDs, so runs never share IDs
	// KeyByEvent keys records by event ID instead of aggregate ID.
	KeyByEvent bool
	// LateMin and LateMax bound how far (as a share of N) a re-published
	// duplicate lands after its original: 0.1 and 0.5 by default.
	LateMin, LateMax float64
}

// Validate reports a spec that cannot be planned.
func (s *Spec) Validate() error {
	var errs []error
	if s.Records <= 0 {
		errs = append(errs, errors.New("records must be positive"))
	}
	if s.DupRate < 0 || s.DupRate > 0.5 {
		errs = append(errs, fmt.Errorf("duplicate rate %v: want 0..0.5", s.DupRate))
	}
	if s.PayloadBytes < 64 {
		errs = append(errs, fmt.Errorf("payload bytes %d: at least 64", s.PayloadBytes))
	}
	if s.RunID == "" || strings.ContainsAny(s.RunID, "\"\\") {
		errs = append(errs, errors.New("run id is empty or has quotes"))
	}
	if s.LateMin < 0 || s.LateMax < s.LateMin {
		errs = append(errs, errors.New("late bounds: want 0 <= min <= max"))
	}
	return errors.Join(errs...)
}

// Record is one input record of a plan: which distinct event it carries.
type Record struct {
	Seq int32 // the distinct event
	Agg int32 // its aggregate
}

// Plan is the ordered list of input records.
type Plan struct {
	spec     Spec
	Records  []Record
	distinct int
	at       string // occurredAt of every event
	pad      string
}

// NewPlan builds the deterministic record order of spec.
func NewPlan(spec Spec) (*Plan, error) {
	if spec.LateMin == 0 && spec.LateMax == 0 {
		spec.LateMin, spec.LateMax = 0.1, 0.5
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(spec.Seed, 0x5eed))
	n := spec.Records
	dups := int(float64(n)*spec.DupRate + 0.5)
	immediate := dups / 2
	late := dups - immediate
	distinct := n - dups
	aggs := max(1, distinct/5) // about five events per aggregate
	agg := make([]int32, distinct)
	for i := range agg {
		agg[i] = int32(rng.IntN(aggs))
	}
	perm := rng.Perm(distinct)
	again := make([]bool, distinct)
	for _, s := range perm[:immediate] {
		again[s] = true
	}
	main := make([]Record, 0, distinct+immediate)
	first := make([]int32, distinct) // position of each event in main
	for s := 0; s < distinct; s++ {
		first[s] = int32(len(main))
		main = append(main, Record{Seq: int32(s), Agg: agg[s]})
		if again[s] {
			main = append(main, Record{Seq: int32(s), Agg: agg[s]})
		}
	}
	type lateRec struct {
		pos int
		rec Record
	}
	lates := make([]lateRec, 0, late)
	lo, hi := int(spec.LateMin*float64(n)), int(spec.LateMax*float64(n))
	for _, s := range perm[immediate : immediate+late] {
		gap := lo
		if hi > lo {
			gap += rng.IntN(hi - lo + 1)
		}
		lates = append(lates, lateRec{pos: int(first[s]) + 1 + gap, rec: Record{Seq: int32(s), Agg: agg[s]}})
	}
	slices.SortStableFunc(lates, func(a, b lateRec) int { return a.pos - b.pos })
	recs := make([]Record, 0, n)
	j := 0
	for i, r := range main {
		for j < len(lates) && lates[j].pos <= i {
			recs = append(recs, lates[j].rec)
			j++
		}
		recs = append(recs, r)
	}
	for ; j < len(lates); j++ {
		recs = append(recs, lates[j].rec)
	}
	p := &Plan{spec: spec, Records: recs, distinct: distinct,
		at: time.Now().UTC().Truncate(time.Millisecond).Format(time.RFC3339Nano)}
	p.pad = strings.Repeat("x", max(0, spec.PayloadBytes-p.payloadLen(0)))
	return p, nil
}

// Distinct is the number of distinct events in the plan.
func (p *Plan) Distinct() int { return p.distinct }

// Len is the number of records.
func (p *Plan) Len() int { return len(p.Records) }

// EventID is the event ID of distinct event seq.
func (p *Plan) EventID(seq int32) string {
	return "evt-" + p.spec.RunID + "-" + strconv.Itoa(int(seq))
}

// Key is the record key of record i: its aggregate ID (or event ID).
func (p *Plan) Key(i int) string {
	if p.spec.KeyByEvent {
		return p.EventID(p.Records[i].Seq)
	}
	return aggregateID(p.Records[i].Agg)
}

func aggregateID(agg int32) string { return "order-" + strconv.Itoa(int(agg)) }

// payloadLen is the length of the payload object of seq without padding.
func (p *Plan) payloadLen(seq int32) int { return len(p.payload(seq, Record{Seq: seq}, "")) }

func (p *Plan) payload(seq int32, r Record, pad string) string {
	return `{"orderId":"` + aggregateID(r.Agg) + `","paymentId":"pay-` + strconv.Itoa(int(seq)) +
		`","amount":` + strconv.Itoa(int(seq%10000)) + `.50,"note":"` + pad + `"}`
}

// Value is the JSON event of record i (duplicates have identical bytes).
func (p *Plan) Value(i int) []byte {
	r := p.Records[i]
	return []byte(`{"eventId":"` + p.EventID(r.Seq) + `","aggregateId":"` + aggregateID(r.Agg) +
		`","type":"OrderPaid","occurredAt":"` + p.at + `","payload":` + p.payload(r.Seq, r, p.pad) + `}`)
}

// RecordHeader is the bench-rec header value of record i.
func RecordHeader(i int) []byte { return strconv.AppendInt(nil, int64(i), 10) }

// ParseRecordHeader reads a bench-rec header value; -1 when it is malformed.
func ParseRecordHeader(v []byte) int {
	n := 0
	if len(v) == 0 {
		return -1
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}
