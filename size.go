package dedup

import "github.com/dedupkit/dedup/internal/kafkautil"

// Dead-letter headers of a record cut to fit the dead-letter topic.
const (
	HeaderDLQOriginalSize   = "dlq-original-size"
	HeaderDLQOriginalSHA256 = "dlq-original-sha256"
)

// ReasonTooLarge dead-letters an event whose output (or loop) record is
// larger than the producer and the topics take.
const ReasonTooLarge = "record-too-large"

// RecordSize is the size the producer accounts for a record: its key,
// value and headers with the record format's overhead, as sarama's
// ProducerMessage.ByteSize counts it.
func RecordSize(key string, value []byte, headers Headers) int {
	n := kafkautil.RecordOverhead + len(key) + len(value)
	for _, h := range headers {
		n += len(h.Key) + len(h.Value) + kafkautil.HeaderOverhead
	}
	return n
}
