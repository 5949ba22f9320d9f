package processor

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/IBM/sarama"
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
		{"repeated key, both kept in order", []*sarama.RecordHeader{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("a"), Value: []byte("2")}}},
		{"more keys than interned", many},
	}
	var k headerKeys
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 2 { // the second conversion uses the interned keys
				got := k.headers(tt.rhs)
				if len(got) != len(tt.rhs) {
					t.Fatalf("%d headers, want %d", len(got), len(tt.rhs))
				}
				for i, h := range got {
					if h.Key != string(tt.rhs[i].Key) || !bytes.Equal(h.Value, tt.rhs[i].Value) {
						t.Fatalf("header %d is %q=%q, want %q=%q", i, h.Key, h.Value, tt.rhs[i].Key, tt.rhs[i].Value)
					}
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
