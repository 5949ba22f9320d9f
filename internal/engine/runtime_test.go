package engine

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/codecs"
)

// fakeTable is a table partition in memory, failing as told.
type fakeTable struct {
	recs           map[string]*codecs.SeenRecord
	getErr, setErr error
}

func (t *fakeTable) Get(key string) (*codecs.SeenRecord, error) { return t.recs[key], t.getErr }
func (t *fakeTable) Set(key string, rec *codecs.SeenRecord) error {
	if t.setErr != nil {
		return t.setErr
	}
	t.recs[key] = rec
	return nil
}

type written struct {
	topic, key string
	headers    dedup.Headers
}

// fakeRuntime records what the engine writes. byKey says whether its own
// partition reads any key (the exactly-once runtime's) or only recordKey
// (goka's); loop is the loop partition it owns, nil for none.
type fakeRuntime struct {
	own       *fakeTable
	byKey     bool
	recordKey string
	loop      *fakeTable
	elsewhere bool // its own partition's table is another member's
	emitErr   error
	emitted   []written
	looped    []written
	forwarded []written
}

func (r *fakeRuntime) Context() context.Context { return context.Background() }
func (r *fakeRuntime) MaxRecordBytes() int      { return 0 }
func (r *fakeRuntime) Table(key string) (Table, error) {
	if r.elsewhere {
		return nil, ErrTableElsewhere
	}
	if !r.byKey && key != r.recordKey {
		return nil, errors.New("only the record's key")
	}
	return r.own, nil
}
func (r *fakeRuntime) LoopTable(string) (Table, bool) { return r.loop, r.loop != nil }
func (r *fakeRuntime) Emit(topic, key string, _ []byte, h dedup.Headers) error {
	if r.emitErr != nil {
		return r.emitErr
	}
	r.emitted = append(r.emitted, written{topic, key, h})
	return nil
}
func (r *fakeRuntime) Loopback(key string, _ []byte, h dedup.Headers) error {
	r.looped = append(r.looped, written{"loop", key, h})
	return nil
}

func (r *fakeRuntime) Forward(key string, _ []byte, h dedup.Headers) error {
	r.forwarded = append(r.forwarded, written{"loop", key, h})
	return nil
}

func newTable() *fakeTable { return &fakeTable{recs: map[string]*codecs.SeenRecord{}} }

// The engine decides where an event is judged and hands the runtime's
// failures back as errors, having written nothing after them.
func TestProcessRecordThroughTheRuntime(t *testing.T) {
	topo, err := dedup.Define("g", dedup.Input("in"), dedup.Output("out"))
	if err != nil {
		t.Fatal(err)
	}
	broken := errors.New("disk on fire")
	input := func(key string) dedup.Record {
		return dedup.Record{Topic: "in", Partition: 2, Offset: 7, Timestamp: time.Now(), Key: key,
			Headers: dedup.Headers{{Key: "trace", Value: []byte("t")}}, Value: []byte(`{"eventId":"e1"}`)}
	}
	badLoop := dedup.Record{Topic: "g-loop", Key: "e1", Headers: dedup.Headers{{Key: "mine", Value: []byte("m")}},
		Value: []byte(`{"eventId":"e1"}`)}
	tests := []struct {
		name      string
		rekey     dedup.RekeyPolicy
		rec       dedup.Record
		rt        *fakeRuntime
		wantErr   string
		emitted   string // topics written, in order
		looped    int
		forwarded int
	}{
		{name: "keyed by ID", rec: input("e1"), rt: &fakeRuntime{own: newTable(), recordKey: "e1"}, emitted: "out"},
		{name: "table read fails", rec: input("e1"), rt: &fakeRuntime{own: &fakeTable{getErr: broken}, recordKey: "e1"},
			wantErr: "disk on fire"},
		{name: "table write fails", rec: input("e1"), rt: &fakeRuntime{own: &fakeTable{recs: map[string]*codecs.SeenRecord{},
			setErr: broken}, recordKey: "e1"}, wantErr: "disk on fire", emitted: "out"},
		{name: "emit fails", rec: input("e1"), rt: &fakeRuntime{own: newTable(), recordKey: "e1", emitErr: broken},
			wantErr: "disk on fire"},
		{name: "re-keyed, loop partition elsewhere", rec: input("order-1"), rt: &fakeRuntime{own: newTable(), recordKey: "order-1"},
			looped: 1},
		{name: "re-keyed, loop partition owned", rec: input("order-1"), rt: &fakeRuntime{own: newTable(), recordKey: "order-1",
			loop: newTable()}, emitted: "out"},
		{name: "rekey=never", rekey: dedup.RekeyNever, rec: input("order-1"), rt: &fakeRuntime{own: newTable(), byKey: true,
			recordKey: "order-1", loop: newTable()}, emitted: "out"},
		{name: "rekey=never, keyless", rekey: dedup.RekeyNever, rec: input(""), rt: &fakeRuntime{own: newTable(), byKey: true},
			emitted: "g-dlq"},
		{name: "rekey=never, table by record key only", rekey: dedup.RekeyNever, rec: input("order-1"),
			rt: &fakeRuntime{own: newTable(), recordKey: "order-1"}, wantErr: "rekey=never needs a runtime that reads the table by key"},
		{name: "bad loop record", rec: badLoop, rt: &fakeRuntime{own: newTable(), recordKey: "e1"}, emitted: "g-dlq"},
		{name: "keyed by ID, table elsewhere", rec: input("e1"), rt: &fakeRuntime{recordKey: "e1", elsewhere: true}, forwarded: 1},
		{name: "re-keyed, table elsewhere", rec: input("order-1"), rt: &fakeRuntime{recordKey: "order-1", elsewhere: true},
			looped: 1},
		{name: "re-keyed, table elsewhere, loop partition owned", rec: input("order-1"),
			rt: &fakeRuntime{recordKey: "order-1", elsewhere: true, loop: newTable()}, emitted: "out"},
		{name: "rekey=never, table elsewhere", rekey: dedup.RekeyNever, rec: input("e1"),
			rt: &fakeRuntime{recordKey: "e1", elsewhere: true}, wantErr: ErrTableElsewhere.Error()},
		{name: "loop record, table elsewhere", rec: dedup.Record{Topic: "g-loop", Key: "e1", Value: []byte(`{"eventId":"e1"}`),
			Headers: dedup.Headers{{Key: "dedup-src-key", Value: []byte("e1")}, {Key: "dedup-src-topic", Value: []byte("in")},
				{Key: "dedup-src-partition", Value: []byte("2")}, {Key: "dedup-src-offset", Value: []byte("7")},
				{Key: "dedup-src-time", Value: []byte(time.Now().UTC().Format(time.RFC3339Nano))}}},
			rt: &fakeRuntime{recordKey: "e1", elsewhere: true}, wantErr: ErrTableElsewhere.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := *topo
			run.Rekey, run.Logger = tt.rekey, slog.New(slog.DiscardHandler)
			err := ProcessRecord(&run, tt.rt, Prepare(&run, tt.rec), tt.rec.Value)
			if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err %v, want %q", err, tt.wantErr)
			}
			var topics []string
			for _, w := range tt.rt.emitted {
				topics = append(topics, w.topic)
			}
			if got := strings.Join(topics, ","); got != tt.emitted || len(tt.rt.looped) != tt.looped || len(tt.rt.forwarded) != tt.forwarded {
				t.Fatalf("emitted %q, %d loop records and %d forwarded, want %q, %d and %d", got, len(tt.rt.looped),
					len(tt.rt.forwarded), tt.emitted, tt.looped, tt.forwarded)
			}
			for _, w := range tt.rt.forwarded {
				if off, _ := w.headers.Get("dedup-src-offset"); w.key != "e1" || string(off) != "7" {
					t.Fatalf("forwarded under key %q with headers %v, want e1 and the source position", w.key, w.headers)
				}
			}
			if tt.emitted == "out" && tt.wantErr == "" {
				judged := tt.rt.own
				if tt.rekey != dedup.RekeyNever && tt.rec.Key != "e1" {
					judged = tt.rt.loop
				}
				if judged.recs["e1"] == nil {
					t.Fatal("e1 not marked seen in the partition that judged it")
				}
			}
		})
	}
	// A bad loop record's dead letter keeps the loop record's own headers.
	topo.Logger = slog.New(slog.DiscardHandler)
	rt := &fakeRuntime{own: newTable(), recordKey: "e1"}
	if err := ProcessRecord(topo, rt, Prepare(topo, badLoop), badLoop.Value); err != nil {
		t.Fatal(err)
	}
	h := rt.emitted[0].headers
	if v, _ := h.Get("mine"); string(v) != "m" {
		t.Fatalf("dead letter headers %v, want the loop record's own", h)
	}
	if v, _ := h.Get(dedup.HeaderDLQReason); string(v) != dedup.ReasonBadLoopRecord {
		t.Fatalf("dead letter reason %q, want %s", v, dedup.ReasonBadLoopRecord)
	}
}
