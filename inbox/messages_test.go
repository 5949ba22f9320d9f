package inbox

import (
	"errors"
	"reflect"
	"testing"

	"github.com/dedupkit/dedup"
)

func TestMessagesRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		msgs []dedup.Message
	}{
		{"none", []dedup.Message{}},
		{"one", []dedup.Message{{Topic: "settlements", Key: "acct-1", Value: []byte(`{"amount":5}`)}}},
		{"tombstone and empty value", []dedup.Message{{Key: "a"}, {Key: "b", Value: []byte{}}}},
		{"headers in order, repeated", []dedup.Message{{Topic: "t", Key: "k", Value: []byte("v"),
			Headers: dedup.Headers{{Key: "h", Value: []byte("1")}, {Key: "h", Value: nil}, {Key: "x", Value: []byte{}}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeMessages(encodeMessages(tc.msgs))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.msgs) {
				t.Fatalf("got %#v, want %#v", got, tc.msgs)
			}
		})
	}
}

func TestMessagesCorrupt(t *testing.T) {
	good := encodeMessages([]dedup.Message{{Topic: "t", Key: "k", Value: []byte("value"),
		Headers: dedup.Headers{{Key: "h", Value: []byte("v")}}}})
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"unknown version", append([]byte{9}, good[1:]...)},
		{"truncated", good[:len(good)-2]},
		{"trailing bytes", append(append([]byte{}, good...), 0)},
		{"huge count", []byte{messagesVersion, 0xff, 0xff, 0xff, 0xff, 0x0f}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := decodeMessages(tc.b); !errors.Is(err, errBadMessages) {
				t.Fatalf("err %v, want errBadMessages", err)
			}
		})
	}
}

func FuzzDecodeMessages(f *testing.F) {
	f.Add(encodeMessages([]dedup.Message{{Topic: "t", Key: "k", Value: []byte("v")}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		msgs, err := decodeMessages(b)
		if err != nil {
			return
		}
		again, err := decodeMessages(encodeMessages(msgs))
		if err != nil || !reflect.DeepEqual(again, msgs) {
			t.Fatalf("re-encoding %#v: %v", msgs, err)
		}
	})
}
