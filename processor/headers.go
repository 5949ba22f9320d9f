package processor

import (
	"github.com/IBM/sarama"

	"github.com/dedupkit/dedup"
)

// headerKeys interns record header keys. Converting a record's headers
// allocates a string for every key of every record: five or more per event
// that went through the loop topic, whose headers carry its source position.
// A topic's records carry the same few keys over and over, so each is
// allocated once. Each claim's goroutine has its own (member.prepare).
type headerKeys map[string]string

// maxHeaderKeys bounds the interned keys, for inputs whose header keys are
// all different (past it, keys are allocated per record as goka does).
const maxHeaderKeys = 256

// headers converts a record's headers, in order; the values are the
// record's own slices.
func (k *headerKeys) headers(rhs []*sarama.RecordHeader) dedup.Headers {
	if len(rhs) == 0 {
		return nil
	}
	h := make(dedup.Headers, len(rhs))
	for i, rh := range rhs {
		h[i] = dedup.Header{Key: k.key(rh.Key), Value: rh.Value}
	}
	return h
}

// recordHeaders converts headers to a produced record's, in order.
func recordHeaders(h dedup.Headers) []sarama.RecordHeader {
	if len(h) == 0 {
		return nil
	}
	out := make([]sarama.RecordHeader, len(h))
	for i, x := range h {
		out[i] = sarama.RecordHeader{Key: []byte(x.Key), Value: x.Value}
	}
	return out
}

func (k *headerKeys) key(b []byte) string {
	if s, ok := (*k)[string(b)]; ok { // no allocation for the lookup
		return s
	}
	s := string(b)
	if *k == nil {
		*k = headerKeys{}
	}
	if len(*k) < maxHeaderKeys {
		(*k)[s] = s
	}
	return s
}
