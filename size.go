package dedup

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/lovoo/goka"
)

// RecordLimiter is a goka.Context of a runtime that knows the largest
// record its producer sends. The topology checks every record of an event
// against it before writing any: a record the producer or a topic refuses
// would fail the whole transaction again at every retry, stopping every
// partition of the member for good, where a dead letter stops only that
// event.
type RecordLimiter interface {
	MaxRecordBytes() int
}

// Dead-letter headers of a record cut to fit the dead-letter topic.
const (
	HeaderDLQOriginalSize   = "dlq-original-size"
	HeaderDLQOriginalSHA256 = "dlq-original-sha256"
)

// ReasonTooLarge dead-letters an event whose output (or loop) record is
// larger than the producer and the topics take.
const ReasonTooLarge = "record-too-large"

// recordOverhead and headerOverhead are sarama's upper bounds of what a
// record (v2 format) adds to its key, value and headers.
const (
	recordOverhead = 5*5 + 10 + 1
	headerOverhead = 2 * 5
)

// RecordSize is the size the producer accounts for a record: its key,
// value and headers with the record format's overhead, as sarama's
// ProducerMessage.ByteSize counts it.
func RecordSize(key string, value []byte, headers Headers) int {
	n := recordOverhead + len(key) + len(value)
	for _, h := range headers {
		n += len(h.Key) + len(h.Value) + headerOverhead
	}
	return n
}

func maxRecord(ctx goka.Context) int {
	if l, ok := ctx.(RecordLimiter); ok {
		return l.MaxRecordBytes()
	}
	return 0
}

// checkSizes reports the first message larger than limit (0: no limit).
func checkSizes(outs []Message, outputs []string, limit int) error {
	if limit <= 0 {
		return nil
	}
	for i, m := range outs {
		if n := RecordSize(m.Key, m.Value, m.Headers); n > limit {
			topic := m.Topic
			if topic == "" {
				topic = outputs[0]
			}
			return fmt.Errorf("message %d to %s is %d bytes, more than the %d bytes a record may have "+
				"(the producer's limit, or the smallest max.message.bytes of the topics the worker writes)", i, topic, n, limit)
		}
	}
	return nil
}

// fitDeadLetter cuts value so that the dead-letter record fits limit,
// adding the original size and SHA-256 to its headers; value as it is when
// it fits or limit is 0.
func fitDeadLetter(key string, value []byte, h Headers, limit int) ([]byte, Headers) {
	if limit <= 0 || RecordSize(key, value, h) <= limit {
		return value, h
	}
	sum := sha256.Sum256(value)
	h = append(h,
		Header{HeaderDLQOriginalSize, []byte(strconv.Itoa(len(value)))},
		Header{HeaderDLQOriginalSHA256, []byte(hex.EncodeToString(sum[:]))})
	room := limit - RecordSize(key, nil, h)
	if room < 0 { // headers alone too large: keep the reason and position only
		var kept Headers
		for _, x := range h {
			switch x.Key {
			case HeaderDLQReason, HeaderDLQGroup, HeaderDLQTopic, HeaderDLQPartition, HeaderDLQOffset, HeaderDLQOriginalSize, HeaderDLQOriginalSHA256:
				kept = append(kept, x)
			}
		}
		h, room = kept, limit-RecordSize(key, nil, kept)
	}
	return value[:max(0, min(room, len(value)))], h
}
