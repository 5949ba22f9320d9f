package wire

import "fmt"

// Bytes is a pass-through goka.Codec for []byte values. It never fails on
// decode, which is what the input and loop topics need: a bad record must
// reach the callback (and the dead-letter topic), not stop the processor.
type Bytes struct{}

// Encode accepts []byte or string.
func (Bytes) Encode(value any) ([]byte, error) {
	switch v := value.(type) {
	case []byte:
		return v, nil
	case string:
		return []byte(v), nil
	case nil:
		return nil, nil
	default:
		return nil, fmt.Errorf("codecs: Bytes encodes []byte, got %T", value)
	}
}

// Decode returns data unchanged.
func (Bytes) Decode(data []byte) (any, error) { return data, nil }
