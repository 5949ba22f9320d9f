package codecs

import (
	"errors"
	"testing"
	"time"
)

func TestSeenRoundTrip(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 123, time.UTC)
	tests := []SeenRecord{
		{},
		{FirstProcessed: now, EventTime: now.Add(-time.Minute), AggregateID: "order-1", Topic: "orders", Partition: 11, Offset: 1 << 40, ExpiresAt: now.Add(7 * 24 * time.Hour)},
		{Topic: "t", Partition: -1, Offset: -1},
	}
	for _, in := range tests {
		data, err := Seen{}.Encode(&in)
		if err != nil {
			t.Fatal(err)
		}
		out, err := Seen{}.Decode(data)
		if err != nil {
			t.Fatalf("decode %x: %v", data, err)
		}
		got := *out.(*SeenRecord)
		if !got.FirstProcessed.Equal(in.FirstProcessed) || !got.EventTime.Equal(in.EventTime) || !got.ExpiresAt.Equal(in.ExpiresAt) ||
			got.AggregateID != in.AggregateID || got.Topic != in.Topic || got.Partition != in.Partition || got.Offset != in.Offset {
			t.Fatalf("round trip: got %+v, want %+v", got, in)
		}
		if exp, err := SeenExpiry(data); err != nil || exp != unixNano(in.ExpiresAt) {
			t.Fatalf("SeenExpiry = %d, %v; want %d", exp, err, unixNano(in.ExpiresAt))
		}
	}
}

func TestSeenDecodeErrors(t *testing.T) {
	good, _ := (&SeenRecord{Topic: "orders", Offset: 5}).MarshalBinary()
	tests := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrBadSeen},
		{"future version", append([]byte{9}, good[1:]...), ErrSeenVersion},
		{"truncated", good[:len(good)-1], ErrBadSeen},
		{"trailing", append(append([]byte{}, good...), 0), ErrBadSeen},
		{"string longer than data", []byte{1, 0, 0, 100, 'a'}, ErrBadSeen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := (Seen{}).Decode(tt.data); !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if _, err := SeenExpiry(tt.data); !errors.Is(err, tt.want) {
				t.Fatalf("SeenExpiry: err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestSeenExpired(t *testing.T) {
	now := time.Now()
	r := SeenRecord{ExpiresAt: now}
	if !r.Expired(now) || r.Expired(now.Add(-time.Nanosecond)) {
		t.Fatal("expiry boundary wrong")
	}
	if (&SeenRecord{}).Expired(now) {
		t.Fatal("a record without expiry must not expire")
	}
}

func FuzzSeen(f *testing.F) {
	good, _ := (&SeenRecord{FirstProcessed: time.Now(), AggregateID: "a", Topic: "t", Partition: 3, Offset: 9}).MarshalBinary()
	f.Add(good)
	f.Add([]byte{1})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var r SeenRecord
		err := r.UnmarshalBinary(data)
		exp, expErr := SeenExpiry(data)
		if (err == nil) != (expErr == nil) {
			t.Fatalf("%x: UnmarshalBinary err %v, SeenExpiry err %v", data, err, expErr)
		}
		if err != nil {
			return
		}
		if exp != unixNano(r.ExpiresAt) {
			t.Fatalf("%x: SeenExpiry %d, record expires %v", data, exp, r.ExpiresAt)
		}
		again, err := r.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var r2 SeenRecord
		if err := r2.UnmarshalBinary(again); err != nil {
			t.Fatalf("re-decode of %x: %v", again, err)
		}
		if r2 != r {
			t.Fatalf("not stable: %+v vs %+v", r, r2)
		}
	})
}
