package wire

import (
	"testing"
)

// A benchmark-sized event: the loadgen shape, a 200-byte payload object.
var benchEvent = []byte(`{"eventId":"evt-5f2a9c-123456","aggregateId":"order-24691","type":"OrderPaid",` +
	`"occurredAt":"2026-12-02T18:00:00.123Z","payload":{"orderId":"order-24691","paymentId":"pay-123456",` +
	`"amount":3456.50,"note":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx` +
	`xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}}`)

// BenchmarkDecodeEvent is the per-message JSON decode of the input envelope.
func BenchmarkDecodeEvent(b *testing.B) {
	d := Decoder{ID: DefaultIDSource()}
	b.SetBytes(int64(len(benchEvent)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Decode(benchEvent, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeEventHeaderID is the CloudEvents binary mode: the ID comes
// from headers and the body is not parsed.
func BenchmarkDecodeEventHeaderID(b *testing.B) {
	d := Decoder{ID: CloudEventsIDSource()}
	h := map[string][]byte{"ce_id": []byte("evt-5f2a9c-123456"), "ce_source": []byte("/orders"),
		"ce_subject": []byte("order-24691"), "ce_time": []byte("2026-12-02T18:00:00.123Z")}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Decode(benchEvent, h); err != nil {
			b.Fatal(err)
		}
	}
}
