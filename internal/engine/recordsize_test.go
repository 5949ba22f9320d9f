package engine

import (
	"bytes"
	"testing"

	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup"
)

// RecordSize must count what sarama counts, or the producer refuses a
// record the topology let through.
func TestRecordSizeIsSaramas(t *testing.T) {
	h := dedup.Headers{{Key: "a", Value: []byte("1")}, {Key: "trace", Value: bytes.Repeat([]byte("x"), 300)}}
	msg := &sarama.ProducerMessage{Key: sarama.StringEncoder("key-1"), Value: sarama.ByteEncoder(make([]byte, 1234))}
	for _, x := range h {
		msg.Headers = append(msg.Headers, sarama.RecordHeader{Key: []byte(x.Key), Value: x.Value})
	}
	if got, want := RecordSize("key-1", make([]byte, 1234), h), msg.ByteSize(2); got != want {
		t.Fatalf("RecordSize %d, sarama's ByteSize %d", got, want)
	}
}
