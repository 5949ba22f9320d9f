package codecs

import (
	"testing"
	"time"
)

func benchSeen() *SeenRecord {
	now := time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	return &SeenRecord{FirstProcessed: now, EventTime: now.Add(-time.Second), AggregateID: "order-24691",
		Topic: "orders", Partition: 7, Offset: 123456789, ExpiresAt: now.Add(7 * 24 * time.Hour)}
}

// BenchmarkSeenEncode is the table codec writing one seen record.
func BenchmarkSeenEncode(b *testing.B) {
	r := benchSeen()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := (Seen{}).Encode(r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSeenDecode is the table codec reading one seen record (every
// duplicate's lookup).
func BenchmarkSeenDecode(b *testing.B) {
	data, err := (Seen{}).Encode(benchSeen())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := (Seen{}).Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}
