package dedup_test

import (
	"encoding/json"

	"github.com/dedupkit/dedup/codecs"
)

func envelope(payload string) *codecs.Event { return &codecs.Event{Payload: json.RawMessage(payload)} }
