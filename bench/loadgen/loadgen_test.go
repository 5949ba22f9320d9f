package loadgen

import (
	"encoding/json"
	"testing"
)

func TestPlanShape(t *testing.T) {
	spec := Spec{Records: 10000, DupRate: 0.2, PayloadBytes: 200, Seed: 7, RunID: "t"}
	p, err := NewPlan(spec)
	if err != nil {
		t.Fatal(err)
	}
	if p.Len() != 10000 || p.Distinct() != 8000 {
		t.Fatalf("%d records, %d distinct; want 10000, 8000", p.Len(), p.Distinct())
	}
	first := map[int32]int{}
	copies := map[int32]int{}
	immediate, late := 0, 0
	for i, r := range p.Records {
		if f, ok := first[r.Seq]; ok {
			// An immediate copy may have a few late ones inserted before it; a
			// late one is at least 10% of N later, or at the end of the stream.
			if i-f < 10 {
				immediate++
			} else if i-f >= 1000 || i >= p.Len()-1000 {
				late++
			}
		} else {
			first[r.Seq] = i
		}
		copies[r.Seq]++
	}
	if len(first) != 8000 {
		t.Fatalf("%d distinct events appear, want 8000", len(first))
	}
	for seq, n := range copies {
		if n < 1 || n > 3 {
			t.Fatalf("event %d appears %d times", seq, n)
		}
	}
	if immediate+late != 2000 || immediate < 900 || late < 900 {
		t.Fatalf("%d immediate and %d late duplicates; want about 1000 each, 2000 in all", immediate, late)
	}
	again, _ := NewPlan(spec)
	for i := range p.Records {
		if p.Records[i] != again.Records[i] {
			t.Fatal("the plan is not deterministic")
		}
	}
}

func TestValueIsTheEnvelope(t *testing.T) {
	p, err := NewPlan(Spec{Records: 10, DupRate: 0.2, PayloadBytes: 200, Seed: 1, RunID: "v"})
	if err != nil {
		t.Fatal(err)
	}
	var ev struct {
		EventID     string          `json:"eventId"`
		AggregateID string          `json:"aggregateId"`
		Payload     json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(p.Value(3), &ev); err != nil {
		t.Fatal(err)
	}
	if ev.EventID != p.EventID(p.Records[3].Seq) || ev.AggregateID != p.Key(3) {
		t.Fatalf("value %s does not match record 3", p.Value(3))
	}
	if n := len(ev.Payload); n < 195 || n > 215 {
		t.Fatalf("payload is %d bytes, want about 200", n)
	}
	if ParseRecordHeader(RecordHeader(1234)) != 1234 || ParseRecordHeader([]byte("x")) != -1 {
		t.Fatal("record header round trip")
	}
}
