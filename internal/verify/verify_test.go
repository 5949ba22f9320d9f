package verify

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/wire"
)

// rec decodes a JSON record the way Run does, at partition p, offset off.
func rec(p int32, off int64, value string) Record {
	return Decode(wire.Decoder{ID: wire.DefaultIDSource()}, p, off, []byte(value), nil)
}

func ev(p int32, off int64, id string) Record {
	return rec(p, off, fmt.Sprintf(`{"eventId":%q,"type":"OrderPaid"}`, id))
}

// ce decodes a CloudEvents binary-mode record (header mode).
func ce(p int32, off int64, source, id string) Record {
	h := []*sarama.RecordHeader{{Key: []byte("ce_id"), Value: []byte(id)}, {Key: []byte("ce_source"), Value: []byte(source)}}
	return Decode(wire.Decoder{ID: wire.CloudEventsIDSource()}, p, off, []byte("opaque body"), h)
}

func dead(r Record, reason string) Record { r.DLQReason = reason; return r }

// on is r read from topic, as Run sets it.
func on(topic string, r Record) Record { r.Topic = topic; return r }

// agg decodes an event of aggregate a in aggregate-id mode; a "" has none.
func agg(p int32, off int64, id, a string) Record {
	v := fmt.Sprintf(`{"eventId":%q,"aggregateId":%q,"type":"OrderPaid"}`, id, a)
	if a == "" {
		v = fmt.Sprintf(`{"eventId":%q,"type":"OrderPaid"}`, id)
	}
	return DecodeKey(wire.Decoder{ID: wire.DefaultIDSource()}, dedup.KeyAggregateID, p, off, []byte(v), nil)
}

func TestVerifyBuild(t *testing.T) {
	tests := []struct {
		name            string
		in, out, dlq    []Record
		want            Report // the counts compared; traces checked below
		missing, dupped []string
		ok              bool
	}{
		{name: "clean, duplicates on the input",
			in:   []Record{ev(0, 0, "e1"), ev(1, 0, "e2"), ev(0, 1, "e1"), ev(1, 1, "e3")},
			out:  []Record{ev(0, 0, "e1"), ev(0, 1, "e2"), ev(1, 0, "e3")},
			want: Report{InputRecords: 4, InputEvents: 3, InputDuplicates: 1, OutputRecords: 3, OutputEvents: 3},
			ok:   true},
		{name: "one missing",
			in:      []Record{ev(0, 0, "e1"), ev(0, 1, "e2"), ev(0, 2, "e2")},
			out:     []Record{ev(0, 0, "e1")},
			want:    Report{InputRecords: 3, InputEvents: 2, InputDuplicates: 1, OutputRecords: 1, OutputEvents: 1, MissingEvents: 1},
			missing: []string{"e2 in=p0@1,p0@2 out="}},
		{name: "one duplicated",
			in:     []Record{ev(0, 0, "e1"), ev(0, 1, "e2")},
			out:    []Record{ev(0, 0, "e1"), ev(1, 0, "e2"), ev(0, 1, "e2"), ev(1, 1, "e2")},
			want:   Report{InputRecords: 2, InputEvents: 2, OutputRecords: 4, OutputEvents: 2, DuplicatedEvents: 1, ExtraOutputs: 2},
			dupped: []string{"e2 in=p0@1 out=p1@0,p0@1"}},
		{name: "unexpected output",
			in:   []Record{ev(0, 0, "e1")},
			out:  []Record{ev(0, 0, "e1"), ev(0, 1, "stray")},
			want: Report{InputRecords: 1, InputEvents: 1, OutputRecords: 2, OutputEvents: 2, UnexpectedEvents: 1, UnexpectedOutputs: 1},
			ok:   true},
		{name: "undecodable input, dead-lettered",
			in:  []Record{ev(0, 0, "e1"), rec(0, 1, "not json"), rec(0, 2, `{"type":"x"}`), rec(0, 3, ""), ev(0, 4, "e2")},
			out: []Record{ev(0, 0, "e1")},
			dlq: []Record{dead(rec(0, 0, "not json"), "not-json"), dead(rec(0, 1, `{"type":"x"}`), "no-id"),
				dead(rec(0, 2, ""), "empty-value"), dead(ev(0, 3, "e2"), "handler-error")},
			want: Report{InputRecords: 5, InputEvents: 2, OutputRecords: 1, OutputEvents: 1, DeadLetterRecords: 4, DeadLetteredEvents: 1},
			ok:   true},
		{name: "two inputs: an event on both is one event",
			in:   []Record{on("eu", ev(0, 0, "e1")), on("us", ev(0, 0, "e1")), on("us", ev(1, 0, "e2"))},
			out:  []Record{ev(0, 0, "e1")},
			want: Report{InputRecords: 3, InputEvents: 2, InputDuplicates: 1, OutputRecords: 1, OutputEvents: 1, MissingEvents: 1},
			// the trace names each input's topic
			missing: []string{"e2 in=us/p1@0 out="}},
		{name: "aggregate-id: one output per aggregate",
			in: []Record{agg(0, 0, "e1", "order-1"), agg(0, 1, "e2", "order-1"), agg(1, 0, "e3", "order-2"),
				agg(1, 1, "e4", "")},
			out:  []Record{agg(0, 0, "e1", "order-1"), agg(0, 1, "e3", "order-2")},
			dlq:  []Record{dead(agg(0, 0, "e4", ""), "no-aggregate-id")},
			want: Report{InputRecords: 4, InputEvents: 2, InputDuplicates: 1, OutputRecords: 2, OutputEvents: 2, DeadLetterRecords: 1},
			ok:   true},
		{name: "aggregate-id: a second event of an aggregate output",
			in:     []Record{agg(0, 0, "e1", "order-1"), agg(0, 1, "e2", "order-1")},
			out:    []Record{agg(0, 0, "e1", "order-1"), agg(0, 1, "e2", "order-1")},
			want:   Report{InputRecords: 2, InputEvents: 1, InputDuplicates: 1, OutputRecords: 2, OutputEvents: 1, DuplicatedEvents: 1, ExtraOutputs: 1},
			dupped: []string{"order-1 in=p0@0,p0@1 out=p0@0,p0@1"}},
		{name: "header mode: the ID is unique with its source",
			in:      []Record{ce(0, 0, "shop", "1"), ce(0, 1, "billing", "1"), ce(0, 2, "shop", "1")},
			out:     []Record{ce(0, 0, "shop", "1")},
			want:    Report{InputRecords: 3, InputEvents: 2, InputDuplicates: 1, OutputRecords: 1, OutputEvents: 1, MissingEvents: 1},
			missing: []string{"billing/1 in=p0@1 out="}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Build(tt.in, tt.out, tt.dlq)
			got := counts(r)
			if want := counts(&tt.want); got != want {
				t.Errorf("counts\n got %s\nwant %s", got, want)
			}
			if g, w := traces(r.Missing), strings.Join(tt.missing, "; "); g != w {
				t.Errorf("missing %q, want %q", g, w)
			}
			if g, w := traces(r.Duplicated), strings.Join(tt.dupped, "; "); g != w {
				t.Errorf("duplicated %q, want %q", g, w)
			}
			if r.OK() != tt.ok || (r.Err() == nil) != tt.ok {
				t.Errorf("OK() = %v, Err() = %v, want ok %v", r.OK(), r.Err(), tt.ok)
			}
		})
	}
}

func TestVerifyCountsReasons(t *testing.T) {
	r := Build([]Record{rec(0, 0, "not json"), rec(0, 1, "[1]"), rec(0, 2, `{"eventId":1}`)},
		[]Record{rec(0, 0, "{}")},
		[]Record{dead(rec(0, 0, "x"), "not-json"), dead(rec(0, 1, "y"), "not-json"), rec(0, 2, "z")})
	if got := fmt.Sprint(r.Undecodable); got != "map[bad-field:1 not-json:2]" {
		t.Errorf("undecodable input %s", got)
	}
	if got := fmt.Sprint(r.UndecodableOutput); got != "map[no-id:1]" {
		t.Errorf("undecodable output %s", got)
	}
	if got := fmt.Sprint(r.DeadLettered); got != "map[(no dlq-reason):1 not-json:2]" {
		t.Errorf("dead-lettered %s", got)
	}
	// In aggregate-id mode an event without an aggregate ID is counted under
	// the reason the worker dead-letters it with.
	r = Build([]Record{agg(0, 0, "e1", ""), agg(0, 1, "e2", "order-1")}, nil, nil)
	if got := fmt.Sprint(r.Undecodable); got != "map[no-aggregate-id:1]" {
		t.Errorf("undecodable input in aggregate-id mode %s", got)
	}
}

func TestVerifyPrint(t *testing.T) {
	r := Build([]Record{ev(0, 0, "e1"), ev(0, 1, "e2"), ev(1, 0, "e3"), rec(1, 1, "junk")},
		[]Record{ev(0, 0, "e1"), ev(0, 1, "e1"), ev(0, 2, "x9")}, nil)
	r.Inputs, r.Output = []string{"in"}, "out"
	var b bytes.Buffer
	r.Print(&b, 1)
	out := b.String()
	for _, want := range []string{
		"input       in: 4 records, 3 distinct events, 0 duplicate records, undecodable 1 (not-json 1)",
		"missing:    2 input events",
		"missing (first 1 of 2):\n  \"e2\"  input p0@1  output none\n",
		"duplicated (first 1 of 1):\n  \"e1\"  input p0@0  output p0@0 p0@1\n",
		"unexpected: 1 output records (1 IDs)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "FAIL: missing 2 (input events with no output), duplicated 1") {
		t.Errorf("last line %q", last)
	}
	b.Reset()
	Build([]Record{ev(0, 0, "e1")}, []Record{ev(0, 0, "e1")}, nil).Print(&b, 20)
	if !strings.HasSuffix(b.String(), "OK: all 1 input events output exactly once\n") {
		t.Errorf("clean report:\n%s", b.String())
	}
}

// With several inputs a trace's input positions name their topics; in
// aggregate-id mode the report counts aggregates.
func TestVerifyPrintInputsAndAggregates(t *testing.T) {
	for _, tc := range []struct {
		name    string
		r       *Report
		inputs  []string
		keyType dedup.KeyType
		want    []string
	}{
		{"two inputs",
			Build([]Record{on("eu", ev(0, 0, "e1")), on("us", ev(0, 3, "e1")), on("us", ev(1, 0, "e2"))}, nil, nil),
			[]string{"eu", "us"}, dedup.KeyEventID, []string{"input       eu, us: 3 records, 2 distinct events, 1 duplicate records",
				"\"e1\"  input eu/p0@0 us/p0@3  output none\n", "\"e2\"  input us/p1@0  output none\n",
				"FAIL: missing 2 (input events with no output), duplicated 0 (events output more than once)"}},
		{"aggregates",
			Build([]Record{agg(0, 0, "e1", "order-1"), agg(0, 1, "e2", "order-1")}, []Record{agg(0, 0, "e1", "order-1")}, nil),
			[]string{"in"}, dedup.KeyAggregateID, []string{"input       in: 2 records, 1 distinct aggregates, 1 duplicate records",
				"output      out: 1 records, 1 distinct aggregates", "OK: all 1 input aggregates output exactly once\n"}},
		{"aggregates, one missing",
			Build([]Record{agg(0, 0, "e1", "order-1"), agg(0, 1, "e2", "order-2")}, []Record{agg(0, 0, "e1", "order-1")}, nil),
			[]string{"in"}, dedup.KeyAggregateID, []string{"\"order-2\"  input p0@1  output none\n",
				"FAIL: missing 1 (input aggregates with no output), duplicated 0 (aggregates output more than once)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.r.Inputs, tc.r.Output, tc.r.KeyType = tc.inputs, "out", tc.keyType
			var b bytes.Buffer
			tc.r.Print(&b, 20)
			for _, want := range tc.want {
				if !strings.Contains(b.String(), want) {
					t.Errorf("report lacks %q:\n%s", want, b.String())
				}
			}
		})
	}
}

func TestVerifyTracesAreBoundedAndEarliestFirst(t *testing.T) {
	var in []Record
	for i := range 3*MaxTraces + 7 {
		in = append(in, ev(int32(i%3), int64(i/3), fmt.Sprintf("e%d", i)))
	}
	r := Build(in, nil, nil)
	if r.MissingEvents != len(in) || len(r.Missing) != MaxTraces {
		t.Fatalf("missing %d with %d traces, want %d with %d", r.MissingEvents, len(r.Missing), len(in), MaxTraces)
	}
	if first, last := r.Missing[0].Inputs[0], r.Missing[MaxTraces-1].Inputs[0]; first != (Position{"", 0, 0}) || last != (Position{"", 0, MaxTraces - 1}) {
		t.Fatalf("traces span %v..%v, want the partition 0 offsets 0..%d", first, last, MaxTraces-1)
	}
}

func TestVerifyConfigNamesTheFlag(t *testing.T) {
	good := Config{Brokers: []string{"h:1"}, Inputs: []string{"i"}, Output: "o", IDSource: wire.DefaultIDSource()}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, ok := range []func(*Config){
		func(c *Config) { c.Inputs = []string{"i", "i-retry"} },
		func(c *Config) { c.KeyType = dedup.KeyEventID },
		func(c *Config) { c.KeyType = dedup.KeyAggregateID },
	} {
		c := good
		ok(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	tests := []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) { c.Brokers = nil }, "--brokers: required"},
		{func(c *Config) { c.Brokers = []string{"localhost"} }, `--brokers: "localhost" has no port`},
		{func(c *Config) { c.Inputs = nil }, "--input: required"},
		{func(c *Config) { c.Inputs = []string{"i", ""} }, `--input: "i," names an empty topic`},
		{func(c *Config) { c.Inputs = []string{"i", "j", "i"} }, `--input: "i" is named twice`},
		{func(c *Config) { c.Output = "" }, "--output: required"},
		{func(c *Config) { c.Output = "i" }, `--input: "i" is also the output or dead-letter topic`},
		{func(c *Config) { c.Inputs = []string{"i", "d"}; c.DLQ = "d" }, `--input: "d" is also the output or dead-letter topic`},
		{func(c *Config) { c.DLQ = "o" }, `--dlq: "o" is also the output topic`},
		{func(c *Config) { c.KeyType = "aggregate" }, `--key-type: "aggregate" is not event-id or aggregate-id`},
		{func(c *Config) { c.IDSource = wire.IDSource{} }, "--id-field:"},
	}
	for _, tt := range tests {
		c := good
		tt.change(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate() = %v, want it to say %q", err, tt.want)
		}
	}
}

func counts(r *Report) string {
	return fmt.Sprintf("in %d/%d/%d out %d/%d dlq %d/%d missing %d dup %d/%d unexpected %d/%d",
		r.InputRecords, r.InputEvents, r.InputDuplicates, r.OutputRecords, r.OutputEvents,
		r.DeadLetterRecords, r.DeadLetteredEvents, r.MissingEvents, r.DuplicatedEvents, r.ExtraOutputs,
		r.UnexpectedEvents, r.UnexpectedOutputs)
}

// traces renders traces as "source/id in=p0@1,topic/p0@2 out=p1@0", with a
// position's topic when it has one.
func traces(ts []Trace) string {
	var s []string
	for _, t := range ts {
		id := t.ID
		if t.Source != "" {
			id = t.Source + "/" + t.ID
		}
		s = append(s, fmt.Sprintf("%s in=%s out=%s", id, join(t.Inputs), join(t.Outputs)))
	}
	return strings.Join(s, "; ")
}

func join(ps []Position) string {
	var s []string
	for _, p := range ps {
		if p.Topic != "" {
			s = append(s, p.Topic+"/"+p.String())
		} else {
			s = append(s, p.String())
		}
	}
	return strings.Join(s, ",")
}
