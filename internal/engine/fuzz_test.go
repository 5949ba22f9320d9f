package engine

import (
	"bytes"
	"testing"
	"time"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/wire"
)

// Any record, however malformed, is either judged (an event with a dedup
// key) or dead-lettered with a named reason and an error; nothing panics.
// Loop records are fuzzed too: their source position comes from headers a
// producer could forge.
func FuzzPrepare(f *testing.F) {
	f.Add([]byte(`{"eventId":"e1","aggregateId":"a1"}`), "k", "dedup-src-partition", []byte("0"), false)
	f.Add([]byte(`{"meta":{"eventId":"e1"}}`), "", "x", []byte(nil), true)
	f.Add([]byte(nil), "k", "dedup-src-time", []byte("not a time"), true)
	f.Add([]byte("\xff\xfe"), "k", "ce_id", []byte("id"), false)
	defs := []*dedup.Topology{
		{Group: "g", Inputs: []string{"in"}, KeyType: dedup.KeyEventID, Retention: time.Hour, EventID: dedup.JSONField("eventId")},
		{Group: "g", Inputs: []string{"in"}, KeyType: dedup.KeyAggregateID, Retention: time.Hour, EventID: dedup.JSONField("meta.eventId")},
		{Group: "g", Inputs: []string{"in"}, KeyType: dedup.KeyEventID, Retention: time.Hour, EventID: dedup.CloudEvents()},
		{Group: "g", Inputs: []string{"in"}, KeyType: dedup.KeyEventID, Retention: time.Hour, EventID: dedup.RecordKey()},
	}
	f.Fuzz(func(t *testing.T, value []byte, key, hkey string, hvalue []byte, loop bool) {
		topic := "in"
		if loop {
			topic = "g-loop"
		}
		rec := dedup.Record{Topic: topic, Partition: 1, Offset: 7, Timestamp: time.Unix(0, 0), Key: key, Value: value,
			Headers: dedup.Headers{{Key: hkey, Value: hvalue}, {Key: "ce_source", Value: []byte("src")}}}
		for _, d := range defs {
			p := Prepare(d, rec)
			switch {
			case p.reason != "" && p.err == nil:
				t.Fatalf("reason %q without an error", p.reason)
			case p.reason == "" && (p.event == nil || p.key == ""):
				t.Fatalf("judged without an event or a key: %+v", p)
			case p.reason == "" && len(p.key) > 2*wire.MaxIDLength+1:
				t.Fatalf("dedup key of %d bytes", len(p.key))
			}
		}
	})
}

// A dead letter always fits its limit, keeps its reason, and its value is
// a prefix of the original (all of it when it fits).
func FuzzFitDeadLetter(f *testing.F) {
	f.Add("k", []byte("value"), "trace", []byte("t"), 200)
	f.Add("", bytes.Repeat([]byte("v"), 3000), "huge", bytes.Repeat([]byte("h"), 3000), 1024)
	f.Fuzz(func(t *testing.T, key string, value []byte, hkey string, hvalue []byte, limit int) {
		if limit < 1024 || limit > 1<<20 || len(key) > 256 {
			return // the runtime refuses limits under 1024; keys are IDs
		}
		h := dedup.Headers{{Key: hkey, Value: hvalue}, {Key: dedup.HeaderDLQReason, Value: []byte("not-json")},
			{Key: dedup.HeaderDLQTopic, Value: []byte("in")}, {Key: dedup.HeaderDLQOffset, Value: []byte("7")}}
		v, out := fitDeadLetter(key, value, h, limit)
		if n := RecordSize(key, v, out); n > limit {
			t.Fatalf("dead letter of %d bytes, limit %d", n, limit)
		}
		if !bytes.HasPrefix(value, v) {
			t.Fatal("value is not a prefix of the original")
		}
		if r, _ := out.Get(dedup.HeaderDLQReason); string(r) != "not-json" {
			t.Fatalf("reason lost: %v", out)
		}
		_, cut := out.Get(dedup.HeaderDLQOriginalSize)
		if fits := RecordSize(key, value, h) <= limit; fits == cut || (fits && len(v) != len(value)) {
			t.Fatalf("fits=%v but cut=%v (%d of %d bytes)", fits, cut, len(v), len(value))
		}
	})
}
