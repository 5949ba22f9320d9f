package engine

import (
	"github.com/dedupkit/dedup"

	"errors"
	"fmt"
	"strconv"
	"time"
)

// dedup.Headers of a loop record that carry the original input record's position
// and key through the loop topic.
const (
	headerLoopSrcKey     = "dedup-src-key"
	headerLoopSrcTopic   = "dedup-src-topic"
	headerLoopSrcPart    = "dedup-src-partition"
	headerLoopSrcOffset  = "dedup-src-offset"
	headerLoopSrcTimeRFC = "dedup-src-time"
)

// loopHeaders carries the original position through the loop topic so the
// seen record, the handler and a dead letter see where the event really
// came from.
func loopHeaders(key string, headers dedup.Headers, pos dedup.Position) dedup.Headers {
	h := make(dedup.Headers, 0, len(headers)+5)
	h = append(h, headers...)
	return append(h,
		dedup.Header{Key: headerLoopSrcKey, Value: []byte(key)},
		dedup.Header{Key: headerLoopSrcTopic, Value: []byte(pos.Topic)},
		dedup.Header{Key: headerLoopSrcPart, Value: []byte(strconv.Itoa(int(pos.Partition)))},
		dedup.Header{Key: headerLoopSrcOffset, Value: []byte(strconv.FormatInt(pos.Offset, 10))},
		dedup.Header{Key: headerLoopSrcTimeRFC, Value: []byte(pos.Timestamp.UTC().Format(time.RFC3339Nano))})
}

// loopSource reads loopHeaders back: the original position, key and headers.
func loopSource(headers dedup.Headers) (dedup.Position, string, dedup.Headers, error) {
	var pos dedup.Position
	get := func(k string) string { v, _ := headers.Get(k); return string(v) }
	part, err1 := strconv.ParseInt(get(headerLoopSrcPart), 10, 32)
	off, err2 := strconv.ParseInt(get(headerLoopSrcOffset), 10, 64)
	ts, err3 := time.Parse(time.RFC3339Nano, get(headerLoopSrcTimeRFC))
	if err := errors.Join(err1, err2, err3); err != nil {
		return pos, "", headers, fmt.Errorf("loop record without its source position: %w", err)
	}
	pos = dedup.Position{Topic: get(headerLoopSrcTopic), Partition: int32(part), Offset: off, Timestamp: ts}
	orig := make(dedup.Headers, 0, len(headers))
	for _, h := range headers {
		switch h.Key {
		case headerLoopSrcKey, headerLoopSrcTopic, headerLoopSrcPart, headerLoopSrcOffset, headerLoopSrcTimeRFC:
		default:
			orig = append(orig, h)
		}
	}
	return pos, get(headerLoopSrcKey), orig, nil
}
