package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestDecoderJSON(t *testing.T) {
	long := strings.Repeat("x", MaxIDLength+1)
	tests := []struct {
		name    string
		src     IDSource
		value   []byte
		wantID  string
		wantAgg string
		wantErr error
	}{
		{"full envelope", DefaultIDSource(), []byte(`{"eventId":"e1","aggregateId":"a1","type":"OrderPaid","occurredAt":"2026-01-02T03:04:05Z","payload":{"amount":3}}`), "e1", "a1", nil},
		{"leading whitespace", DefaultIDSource(), []byte(" \n{\"eventId\":\"e2\"}"), "e2", "", nil},
		{"custom field", IDSource{Field: "id"}, []byte(`{"id":"x-9","aggregateId":"a"}`), "x-9", "a", nil},
		{"custom field missing", IDSource{Field: "id"}, []byte(`{"eventId":"e1"}`), "", "", ErrNoID},
		{"custom field not a string", IDSource{Field: "id"}, []byte(`{"id":5}`), "", "", ErrBadField},
		{"null", DefaultIDSource(), nil, "", "", ErrNullValue},
		{"empty", DefaultIDSource(), []byte{}, "", "", ErrEmptyValue},
		{"not json", DefaultIDSource(), []byte("hello"), "", "", ErrNotJSON},
		{"json array", DefaultIDSource(), []byte(`[1,2]`), "", "", ErrNotJSON},
		{"truncated json", DefaultIDSource(), []byte(`{"eventId":"e`), "", "", ErrNotJSON},
		{"no id", DefaultIDSource(), []byte(`{"aggregateId":"a"}`), "", "", ErrNoID},
		{"empty id", DefaultIDSource(), []byte(`{"eventId":""}`), "", "", ErrNoID},
		{"id wrong type", DefaultIDSource(), []byte(`{"eventId":42}`), "", "", ErrBadField},
		{"bad time", DefaultIDSource(), []byte(`{"eventId":"e","occurredAt":"yesterday"}`), "", "", ErrBadField},
		{"id too long", DefaultIDSource(), []byte(`{"eventId":"` + long + `"}`), "", "", ErrIDTooLong},
		{"aggregate too long", DefaultIDSource(), []byte(`{"eventId":"e","aggregateId":"` + long + `"}`), "", "", ErrIDTooLong},
		{"id at limit", DefaultIDSource(), []byte(`{"eventId":"` + long[1:] + `"}`), long[1:], "", nil},
		{"id twice", DefaultIDSource(), []byte(`{"eventId":"a","payload":{},"eventId":"b"}`), "", "", ErrDuplicateField},
		{"id twice, same value", DefaultIDSource(), []byte(`{"eventId":"a","eventId":"a"}`), "", "", ErrDuplicateField},
		{"id twice, once escaped", DefaultIDSource(), []byte(`{"eventId":"a","event\u0049d":"b"}`), "", "", ErrDuplicateField},
		{"id twice, later one null", DefaultIDSource(), []byte(`{"eventId":"a","eventId":null}`), "", "", ErrDuplicateField},
		{"aggregate twice", DefaultIDSource(), []byte(`{"eventId":"e","aggregateId":"a","aggregateId":"b"}`), "", "", ErrDuplicateField},
		{"occurredAt twice", DefaultIDSource(), []byte(`{"eventId":"e","occurredAt":null,"occurredAt":"2026-01-02T03:04:05Z"}`), "", "", ErrDuplicateField},
		{"payload twice", DefaultIDSource(), []byte(`{"eventId":"e","payload":1,"payload":2}`), "", "", ErrDuplicateField},
		{"type twice", DefaultIDSource(), []byte(`{"eventId":"e","type":"A","type":"B"}`), "", "", ErrDuplicateField},
		{"unread member twice is the handler's business", DefaultIDSource(), []byte(`{"eventId":"e","note":1,"note":2}`), "e", "", nil},
		{"same name in payload and envelope", DefaultIDSource(), []byte(`{"eventId":"e","payload":{"eventId":"x"}}`), "e", "", nil},
		{"nested path", IDSource{Field: "meta.id"}, []byte(`{"meta":{"id":"n1","id2":"x"}}`), "n1", "", nil},
		{"nested step twice", IDSource{Field: "meta.id"}, []byte(`{"meta":{"id":"a","id":"b"}}`), "", "", ErrDuplicateField},
		{"nested parent twice", IDSource{Field: "meta.id"}, []byte(`{"meta":{"id":"a"},"meta":{"id":"b"}}`), "", "", ErrDuplicateField},
		{"nested sibling twice", IDSource{Field: "meta.id"}, []byte(`{"meta":{"id":"a","v":1,"v":2}}`), "a", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := Decoder{ID: tt.src}.Decode(tt.value, nil)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				var de *DecodeError
				if !errors.As(err, &de) || de.Detail == "" {
					t.Fatalf("err %v is not a *DecodeError with detail", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if ev.EventID != tt.wantID || ev.AggregateID != tt.wantAgg {
				t.Fatalf("got id=%q agg=%q, want %q %q", ev.EventID, ev.AggregateID, tt.wantID, tt.wantAgg)
			}
			if string(ev.Raw) != string(tt.value) {
				t.Fatalf("Raw not kept")
			}
		})
	}
}

func TestDecoderCloudEventsHeaders(t *testing.T) {
	d := Decoder{ID: CloudEventsIDSource()}
	body := []byte("opaque, not json")
	ev, err := d.Decode(body, map[string][]byte{
		"ce_id": []byte("42"), "ce_source": []byte("/orders"), "ce_subject": []byte("order-7"),
		"ce_type": []byte("OrderPaid"), "ce_time": []byte("2026-03-04T05:06:07Z"),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	if ev.EventID != "42" || ev.Source != "/orders" || ev.AggregateID != "order-7" || ev.Type != "OrderPaid" || !ev.OccurredAt.Equal(want) {
		t.Fatalf("unexpected event %+v", ev)
	}
	if _, err := d.Decode(body, map[string][]byte{"ce_id": []byte("42")}); !errors.Is(err, ErrNoID) {
		t.Fatalf("missing ce_source: err = %v, want ErrNoID", err)
	}
	if _, err := d.Decode(body, nil); !errors.Is(err, ErrNoID) {
		t.Fatalf("missing ce_id: err = %v, want ErrNoID", err)
	}
	if _, err := d.Decode(body, map[string][]byte{"ce_id": {0xff, 0xfe}, "ce_source": []byte("s")}); !errors.Is(err, ErrBadField) {
		t.Fatalf("invalid utf-8 id: err = %v, want ErrBadField", err)
	}
	// ("a\x00b","c") and ("a","b\x00c") would share the key "a\x00b\x00c".
	if _, err := d.Decode(body, map[string][]byte{"ce_id": []byte("c"), "ce_source": []byte("a\x00b")}); !errors.Is(err, ErrBadField) {
		t.Fatalf("NUL in ce_source: err = %v, want ErrBadField", err)
	}
	if ev, err := d.Decode(body, map[string][]byte{"ce_id": []byte("b\x00c"), "ce_source": []byte("a")}); err != nil || ev.EventID != "b\x00c" {
		t.Fatalf("NUL in ce_id: ev %+v, err %v; the key stays unambiguous, so it is kept", ev, err)
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	in := &Event{EventID: "e1", AggregateID: "a1", Type: "OrderPaid",
		OccurredAt: time.Date(2026, 5, 6, 7, 8, 9, 10, time.UTC), Payload: []byte(`{"amount":12.5}`)}
	data, err := Envelope{}.Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Envelope{}.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*Event)
	if got.EventID != in.EventID || got.AggregateID != in.AggregateID || got.Type != in.Type ||
		!got.OccurredAt.Equal(in.OccurredAt) || string(got.Payload) != string(in.Payload) {
		t.Fatalf("round trip: got %+v, want %+v", got, in)
	}
	if _, err := (Envelope{}).Encode("nope"); err == nil {
		t.Fatal("Encode accepted a string")
	}
}

func TestReason(t *testing.T) {
	_, err := Decoder{ID: DefaultIDSource()}.Decode([]byte("x"), nil)
	if got := Reason(err); got != "not-json" {
		t.Fatalf("Reason = %q", got)
	}
	if got := Reason(errors.New("boom")); got != "other" {
		t.Fatalf("Reason = %q", got)
	}
}

func FuzzDecoder(f *testing.F) {
	f.Add([]byte(`{"eventId":"e1","aggregateId":"a","occurredAt":"2026-01-02T03:04:05Z","payload":{}}`), "eventId", "")
	f.Add([]byte(`{"id":"x"}`), "id", "")
	f.Add([]byte("not json"), "eventId", "")
	f.Add([]byte{}, "", "ce_id")
	f.Fuzz(func(t *testing.T, value []byte, field, header string) {
		src := IDSource{Field: field, Header: header}
		headers := map[string][]byte{"ce_id": value, "ce_source": []byte(field)}
		ev, err := Decoder{ID: src}.Decode(value, headers)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %v is not a *DecodeError", err)
			}
			return
		}
		if ev.EventID == "" || len(ev.EventID) > MaxIDLength {
			t.Fatalf("accepted bad ID %q", ev.EventID)
		}
	})
}

func TestDecoderRejectsInvalidUTF8(t *testing.T) {
	_, err := Decoder{ID: DefaultIDSource()}.Decode([]byte("{\"eventId\":\"a\xff\"}"), nil)
	if !errors.Is(err, ErrBadField) {
		t.Fatalf("err = %v, want ErrBadField", err)
	}
}

// FuzzScanObject holds the one-pass scanner to encoding/json: it accepts
// exactly the documents json.Valid accepts that are objects, and the event ID
// it decodes is the one encoding/json reads.
func FuzzScanObject(f *testing.F) {
	f.Add([]byte(`{"eventId":"e1","aggregateId":"a","occurredAt":"2026-01-02T03:04:05Z","payload":{"x":[1,2.5e3,-0,true,null]}}`))
	f.Add([]byte(` {"a\u0041":"\ud83d\ude00","eventId":"x\"y"} `))
	f.Add([]byte(`{"eventId":"a","eventId":"b"}`))
	f.Add([]byte(`{"n":01}`))
	f.Add([]byte(`[1]`))
	f.Fuzz(func(t *testing.T, value []byte) {
		trimmed := bytes.TrimSpace(value)
		want := json.Valid(value) && len(trimmed) > 0 && trimmed[0] == '{'
		got := scanObject(value, func([]byte, bool, []byte) error { return nil }) == nil
		if got != want {
			t.Fatalf("scanObject accepts %q: %v, json.Valid object: %v", value, got, want)
		}
		if !want || !utf8.Valid(value) {
			return
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(value, &fields); err != nil {
			t.Fatalf("json.Unmarshal of a valid object %q: %v", value, err)
		}
		var id string
		if json.Unmarshal(fields["eventId"], &id) != nil {
			return // not a string: the decoder must refuse it, checked below
		}
		ev, err := Decoder{ID: DefaultIDSource()}.Decode(value, nil)
		if errors.Is(err, ErrDuplicateField) {
			if !hasRepeatedEnvelopeMember(t, value) {
				t.Fatalf("decode %q: %v, but no envelope member repeats", value, err)
			}
			return
		}
		if err != nil {
			if id != "" && !errors.Is(err, ErrBadField) && !errors.Is(err, ErrIDTooLong) {
				t.Fatalf("decode %q: %v, but encoding/json reads the ID %q", value, err, id)
			}
			return
		}
		if ev.EventID != id {
			t.Fatalf("decode %q: ID %q, encoding/json reads %q", value, ev.EventID, id)
		}
	})
}

func TestDecoderRejectsLoneSurrogate(t *testing.T) {
	for _, v := range []string{`{"eventId":"a\ud800"}`, `{"eventId":"a\udbff"}`, "{\"eventId\":\"a\uFFFD\"}"} {
		_, err := Decoder{ID: DefaultIDSource()}.Decode([]byte(v), nil)
		if !errors.Is(err, ErrBadField) {
			t.Errorf("%s: err = %v, want ErrBadField", v, err)
		}
	}
}

func TestDecodeNestedIDPath(t *testing.T) {
	tests := []struct {
		value, path, want string
		ok                bool
	}{
		{`{"meta":{"eventId":"e1"},"type":"T"}`, "meta.eventId", "e1", true},
		{`{"a":{"b":{"c":"deep"}}}`, "a.b.c", "deep", true},
		{`{"meta":{"other":"x"}}`, "meta.eventId", "", false},
		{`{"meta":"flat"}`, "meta.eventId", "", false},
		{`{"meta":null}`, "meta.eventId", "", false},
		{`{"meta.eventId":"dotted"}`, "meta.eventId", "", false},
		{`{"eventId":"top"}`, "eventId", "top", true},
	}
	for _, tt := range tests {
		ev, err := Decoder{ID: IDSource{Field: tt.path}}.Decode([]byte(tt.value), nil)
		if tt.ok != (err == nil) {
			t.Fatalf("%s in %s: err %v, want ok=%v", tt.path, tt.value, err, tt.ok)
		}
		if err == nil && ev.EventID != tt.want {
			t.Fatalf("%s in %s: ID %q, want %q", tt.path, tt.value, ev.EventID, tt.want)
		}
		if err != nil && Reason(err) != "no-id" {
			t.Fatalf("%s in %s: reason %q, want no-id", tt.path, tt.value, Reason(err))
		}
	}
}

// hasRepeatedEnvelopeMember says, by encoding/json's tokenizer, whether a
// top-level member the decoder reads occurs twice in the object value.
func hasRepeatedEnvelopeMember(t *testing.T, value []byte) bool {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(value))
	if _, err := dec.Token(); err != nil { // '{'
		t.Fatalf("tokenize %q: %v", value, err)
	}
	count := map[string]int{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("tokenize %q: %v", value, err)
		}
		count[tok.(string)]++
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatalf("tokenize %q: %v", value, err)
		}
	}
	for _, name := range []string{"eventId", "aggregateId", "type", "occurredAt", "payload"} {
		if count[name] > 1 {
			return true
		}
	}
	return false
}

// TestHasSpecialByte compares the eight-bytes-at-once check with the byte
// table it stands for: every byte value at every position among plain
// filler, then every pair of byte values at two positions, where the borrow
// of one byte's subtraction reaches the next.
func TestHasSpecialByte(t *testing.T) {
	word := func(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }
	special := func(b []byte) bool {
		for _, c := range b {
			if !plainStringByte[c] {
				return true
			}
		}
		return false
	}
	for c := 0; c < 256; c++ {
		for pos := 0; pos < 8; pos++ {
			b := []byte("abcdefgh")
			b[pos] = byte(c)
			if got, want := hasSpecialByte(word(b)), special(b); got != want {
				t.Fatalf("%q: hasSpecialByte %v, byte table %v", b, got, want)
			}
		}
	}
	for c1 := 0; c1 < 256; c1++ {
		for c2 := 0; c2 < 256; c2++ {
			for _, pos := range [][2]int{{0, 1}, {3, 4}, {6, 7}, {0, 7}} {
				b := []byte{0xff, 0x80, 0x21, 0x5d, 0x23, 0x7f, 0x20, 0xc3}
				b[pos[0]], b[pos[1]] = byte(c1), byte(c2)
				if got, want := hasSpecialByte(word(b)), special(b); got != want {
					t.Fatalf("% x: hasSpecialByte %v, byte table %v", b, got, want)
				}
			}
		}
	}
}
