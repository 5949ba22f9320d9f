package engine

import (
	"github.com/dedupkit/dedup"

	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
)

func TestFitDeadLetter(t *testing.T) {
	big := bytes.Repeat([]byte("v"), 5000)
	base := dedup.Headers{{Key: dedup.HeaderDLQReason, Value: []byte("not-json")}, {Key: dedup.HeaderDLQError, Value: []byte("bad")}}
	tests := []struct {
		name      string
		value     []byte
		headers   dedup.Headers
		limit     int
		truncated bool
	}{
		{"fits", []byte("small"), base, 1000, false},
		{"no limit", big, base, 0, false},
		{"cut to fit", big, base, 2000, true},
		{"headers alone too large", big, append(dedup.Headers{{Key: "huge", Value: bytes.Repeat([]byte("h"), 3000)}}, base...), 2000, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, h := fitDeadLetter("k", tt.value, tt.headers, tt.limit)
			if tt.limit > 0 && RecordSize("k", v, h) > tt.limit {
				t.Fatalf("%d bytes, limit %d", RecordSize("k", v, h), tt.limit)
			}
			size, _ := h.Get(dedup.HeaderDLQOriginalSize)
			sum, _ := h.Get(dedup.HeaderDLQOriginalSHA256)
			if !tt.truncated {
				if !bytes.Equal(v, tt.value) || size != nil {
					t.Fatalf("cut a record that fits: %d of %d bytes, headers %v", len(v), len(tt.value), h)
				}
				return
			}
			want := sha256.Sum256(tt.value)
			if string(size) != strconv.Itoa(len(tt.value)) || string(sum) != hex.EncodeToString(want[:]) ||
				!bytes.HasPrefix(tt.value, v) || len(v) == 0 {
				t.Fatalf("cut record: %d bytes, size header %q, sha %q", len(v), size, sum)
			}
			if r, _ := h.Get(dedup.HeaderDLQReason); string(r) != "not-json" {
				t.Fatalf("the reason was dropped: %v", h)
			}
		})
	}
}

func TestCheckSizesNamesTheTopic(t *testing.T) {
	outs := []dedup.Message{{Key: "a", Value: []byte("ok")}, {Topic: "audit", Key: "b", Value: make([]byte, 900)}}
	if err := checkSizes(outs, []string{"out", "audit"}, 1000); err != nil {
		t.Fatalf("fits: %v", err)
	}
	err := checkSizes(outs, []string{"out", "audit"}, 500)
	if err == nil || !strings.Contains(err.Error(), "message 1 to audit is 937 bytes, more than the 500") {
		t.Fatalf("err %v", err)
	}
}
