package processor

import (
	"bytes"
	"maps"
	"strconv"
	"testing"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
)

func TestHeaderKeysConvertLikeGoka(t *testing.T) {
	many := make([]*sarama.RecordHeader, maxHeaderKeys+10)
	for i := range many {
		many[i] = &sarama.RecordHeader{Key: []byte("k" + strconv.Itoa(i)), Value: []byte{byte(i)}}
	}
	tests := []struct {
		name string
		rhs  []*sarama.RecordHeader
	}{
		{"none", nil},
		{"one", []*sarama.RecordHeader{{Key: []byte("trace"), Value: []byte("t1")}}},
		{"nil value", []*sarama.RecordHeader{{Key: []byte("a"), Value: nil}}},
		{"repeated key, last wins", []*sarama.RecordHeader{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("a"), Value: []byte("2")}}},
		{"more keys than interned", many},
	}
	var k headerKeys
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 2 { // the second conversion uses the interned keys
				got, want := k.headers(tt.rhs), goka.HeadersFromSarama(tt.rhs)
				if !maps.EqualFunc(got, want, bytes.Equal) {
					t.Fatalf("headers %v, goka gives %v", got, want)
				}
			}
		})
	}
	if len(k) > maxHeaderKeys {
		t.Fatalf("%d keys interned, bound is %d", len(k), maxHeaderKeys)
	}
}

// A key seen before costs no allocation.
func TestHeaderKeysInternedKeysDoNotAllocate(t *testing.T) {
	var k headerKeys
	b := []byte("dedup-loop-src-offset")
	k.key(b)
	if n := testing.AllocsPerRun(100, func() { k.key(b) }); n != 0 {
		t.Fatalf("%v allocations per interned key, want 0", n)
	}
}
