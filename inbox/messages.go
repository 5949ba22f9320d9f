package inbox

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dedupkit/dedup"
)

// The messages column holds what the handler returned for the event, so
// that a retried event writes the same outputs without running the handler's
// database work again: a version byte, then per message its topic, key,
// value and headers, each length-prefixed (uvarint).
const messagesVersion = 1

var errBadMessages = errors.New("inbox: stored messages do not decode")

func encodeMessages(msgs []dedup.Message) []byte {
	n := 1
	for _, m := range msgs {
		n += len(m.Topic) + len(m.Key) + len(m.Value) + 4*binary.MaxVarintLen32
		for _, h := range m.Headers {
			n += len(h.Key) + len(h.Value) + 2*binary.MaxVarintLen32
		}
	}
	b := make([]byte, 0, n)
	b = append(b, messagesVersion)
	b = binary.AppendUvarint(b, uint64(len(msgs)))
	for _, m := range msgs {
		b = appendBytes(b, []byte(m.Topic))
		b = appendBytes(b, []byte(m.Key))
		b = appendNullable(b, m.Value)
		b = binary.AppendUvarint(b, uint64(len(m.Headers)))
		for _, h := range m.Headers {
			b = appendBytes(b, []byte(h.Key))
			b = appendNullable(b, h.Value)
		}
	}
	return b
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// appendNullable keeps nil apart from empty: a nil value is a tombstone.
func appendNullable(b, v []byte) []byte {
	if v == nil {
		return binary.AppendUvarint(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(v))+1)
	return append(b, v...)
}

func decodeMessages(b []byte) ([]dedup.Message, error) {
	if len(b) == 0 || b[0] != messagesVersion {
		return nil, fmt.Errorf("%w: version %v", errBadMessages, b[:min(1, len(b))])
	}
	d := decoder{b: b[1:]}
	msgs := make([]dedup.Message, d.count())
	for i := range msgs {
		m := &msgs[i]
		m.Topic, m.Key, m.Value = string(d.bytes()), string(d.bytes()), d.nullable()
		if n := d.count(); n > 0 {
			m.Headers = make(dedup.Headers, n)
			for j := range m.Headers {
				m.Headers[j] = dedup.Header{Key: string(d.bytes()), Value: d.nullable()}
			}
		}
	}
	if d.err != nil || len(d.b) != 0 {
		return nil, errBadMessages
	}
	return msgs, nil
}

// decoder reads what encodeMessages wrote; after the first error every read
// returns zero values and err stays set.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errBadMessages
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count is a length of a list; each element takes at least a byte, so a
// count beyond the bytes left is corrupt (and is not allocated).
func (d *decoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.err = errBadMessages
		return 0
	}
	return int(n)
}

func (d *decoder) take(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = errBadMessages
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte { return d.take(d.uvarint()) }

func (d *decoder) nullable() []byte {
	n := d.uvarint()
	if n == 0 || d.err != nil {
		return nil
	}
	return d.take(n - 1)
}
