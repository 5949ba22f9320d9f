package dedup

// Dead-letter headers of a record cut to fit the dead-letter topic.
const (
	HeaderDLQOriginalSize   = "dlq-original-size"
	HeaderDLQOriginalSHA256 = "dlq-original-sha256"
)

// ReasonTooLarge dead-letters an event whose output (or loop) record is
// larger than the producer and the topics take.
const ReasonTooLarge = "record-too-large"
