package engine

import (
	"github.com/dedupkit/dedup"
	"github.com/dedupkit/dedup/internal/kafkautil"

	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
)

// checkSizes reports the first message larger than limit (0: no limit).
func checkSizes(outs []dedup.Message, outputs []string, limit int) error {
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
func fitDeadLetter(key string, value []byte, h dedup.Headers, limit int) ([]byte, dedup.Headers) {
	if limit <= 0 || RecordSize(key, value, h) <= limit {
		return value, h
	}
	sum := sha256.Sum256(value)
	h = append(h,
		dedup.Header{Key: dedup.HeaderDLQOriginalSize, Value: []byte(strconv.Itoa(len(value)))},
		dedup.Header{Key: dedup.HeaderDLQOriginalSHA256, Value: []byte(hex.EncodeToString(sum[:]))})
	room := limit - RecordSize(key, nil, h)
	if room < 0 { // headers alone too large: keep the reason and position only
		var kept dedup.Headers
		for _, x := range h {
			switch x.Key {
			case dedup.HeaderDLQReason, dedup.HeaderDLQGroup, dedup.HeaderDLQTopic, dedup.HeaderDLQPartition, dedup.HeaderDLQOffset, dedup.HeaderDLQOriginalSize, dedup.HeaderDLQOriginalSHA256:
				kept = append(kept, x)
			}
		}
		h, room = kept, limit-RecordSize(key, nil, kept)
	}
	return value[:max(0, min(room, len(value)))], h
}

// RecordSize is the size the producer accounts for a record: its key,
// value and headers with the record format's overhead, as sarama's
// ProducerMessage.ByteSize counts it.
func RecordSize(key string, value []byte, headers dedup.Headers) int {
	n := kafkautil.RecordOverhead + len(key) + len(value)
	for _, h := range headers {
		n += len(h.Key) + len(h.Value) + kafkautil.HeaderOverhead
	}
	return n
}
