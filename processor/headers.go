package processor

import (
	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
)

// headerKeys interns record header keys. goka's Context gives headers as a
// map, and converting a record's headers (goka.HeadersFromSarama) allocates
// a string for every key of every record: five or more per event that went
// through the loop topic, whose headers carry its source position. A topic's
// records carry the same few keys over and over, so each is allocated once.
// Each claim's goroutine has its own (member.prepare).
type headerKeys map[string]string

// maxHeaderKeys bounds the interned keys, for inputs whose header keys are
// all different (past it, keys are allocated per record as goka does).
const maxHeaderKeys = 256

// headers converts a record's headers into goka's map; the values are the
// record's own slices, as in goka.HeadersFromSarama.
func (k *headerKeys) headers(rhs []*sarama.RecordHeader) goka.Headers {
	h := make(goka.Headers, len(rhs))
	for _, rh := range rhs {
		h[k.key(rh.Key)] = rh.Value
	}
	return h
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
